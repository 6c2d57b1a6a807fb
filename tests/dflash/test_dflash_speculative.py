"""Speculative decoding: token for token the target's greedy decoding, whatever the drafts."""

import pytest
import torch
from dflash_helpers import drafter, prompt_batch, sharp_target, tokenizer

from xdllm.interfaces import DenoisingStep
from xdllm_models.arlm.predictor import ARPredictor
from xdllm_models.dflash import predictor as speculative
from xdllm_models.dflash.predictor import SpeculativePredictor

PROMPTS = [[5, 6, 7, 8], [9], [10, 11, 12, 5, 6, 7], [8, 8]]


@pytest.fixture(scope="module")
def target(target_run):
    return sharp_target(target_run)


def greedy(target, prompts, new_tokens, stop_at_eos=True):
    return ARPredictor(new_tokens, tokenizer(), stop_at_eos=stop_at_eos).predict(prompt_batch(prompts), model=target)


@pytest.mark.parametrize("block_size", [2, 3, 4, 8])
@pytest.mark.parametrize("stop_at_eos", [True, False])
def test_output_is_the_targets_greedy_decoding(target_run, target, block_size, stop_at_eos):
    expected = greedy(target, PROMPTS, 12, stop_at_eos)
    predictor = SpeculativePredictor(12, tokenizer(), stop_at_eos=stop_at_eos)
    out = predictor.predict(prompt_batch(PROMPTS), model=drafter(target_run, block_size), frozen={"target": target})
    assert torch.equal(out["ids"], expected["ids"])
    assert out["text"] == expected["text"]
    assert out["generated_tokens"] == expected["steps_taken"]  # one token per target-alone pass


def oracle_drafts(expected_ids, output_start, wrong_every):
    """A stand-in for the drafter's pass: the target's own continuation, with every
    ``wrong_every``-th drafted offset of the output replaced by a wrong token."""
    def draft(self, anchor, anchor_position, active):
        rows = anchor.shape[0]
        offsets = anchor_position[:, None] + 1 + torch.arange(self.block_size - 1)  # RoPE positions
        first_position = self.canvas.positions.gather(1, output_start[:, None])
        region_offsets = offsets - first_position
        columns = (output_start[:, None] + region_offsets).clamp(max=expected_ids.shape[1] - 1)
        drafts = expected_ids.gather(1, columns)
        wrong = (region_offsets % wrong_every) == wrong_every - 1
        drafts = torch.where(wrong, (drafts + 1) % 20 + 4, drafts)
        vocab = self.target.config.vocab_size
        return drafts, torch.full((rows, self.block_size - 1, vocab), 1.0 / vocab)
    return draft


def expected_rounds(new_tokens, block_size, wrong_every):
    """Verification rounds for the oracle drafts: each commits the drafts before the first wrong
    offset and the target's token, within the budget (the prompt pass gives offset 0)."""
    filled, rounds = 1, 0
    while filled < new_tokens:
        right = 0
        while right < block_size - 1 and (filled + right) % wrong_every != wrong_every - 1:
            right += 1
        filled += min(right + 1, new_tokens - filled)
        rounds += 1
    return rounds


@pytest.mark.parametrize("block_size, wrong_every", [(4, 3), (8, 5), (8, 100), (16, 7)])
def test_partly_right_drafts_are_accepted_up_to_their_first_error(target_run, target, monkeypatch, block_size,
                                                                   wrong_every):
    expected = greedy(target, PROMPTS, 14, stop_at_eos=False)
    monkeypatch.setattr(speculative._SpeculativeRun, "_draft",
                        oracle_drafts(expected["ids"], expected["output_start_idx"], wrong_every))
    predictor = SpeculativePredictor(14, tokenizer(), stop_at_eos=False)
    out = predictor.predict(prompt_batch(PROMPTS), model=drafter(target_run, block_size), frozen={"target": target})
    assert torch.equal(out["ids"], expected["ids"])
    rounds = expected_rounds(14, block_size, wrong_every)
    assert out["target_passes"] == [1 + rounds] * len(PROMPTS)
    assert out["draft_passes"] == [rounds] * len(PROMPTS)
    assert out["generated_tokens"] == [14] * len(PROMPTS)


def test_target_alone_mode_is_the_arlm_predictor(target_run, target):
    expected = greedy(target, PROMPTS, 10)
    out = SpeculativePredictor(10, tokenizer(), speculative=False).predict(
        prompt_batch(PROMPTS), model=drafter(target_run), frozen={"target": target})
    assert torch.equal(out["ids"], expected["ids"])
    assert out["target_passes"] == expected["steps_taken"] and set(out["draft_passes"]) == {0}


def test_rows_do_not_depend_on_their_batch(target_run, target):
    model = drafter(target_run, 4)
    predictor = SpeculativePredictor(12, tokenizer())
    together = predictor.predict(prompt_batch(PROMPTS), model=model, frozen={"target": target})
    for row, prompt in enumerate(PROMPTS):
        alone = predictor.predict(prompt_batch([prompt], first_index=row), model=model, frozen={"target": target})
        assert alone["text"] == [together["text"][row]]
        assert alone["target_passes"] == [together["target_passes"][row]]


def test_without_a_target_the_error_says_how_to_give_one(target_run):
    with pytest.raises(ValueError, match="frozen.target=<arlm run directory>"):
        SpeculativePredictor(4, tokenizer()).predict(prompt_batch(PROMPTS), model=drafter(target_run))


class Steps:
    k = 3

    def __init__(self):
        self.steps: list[DenoisingStep] = []

    def begin(self, batch, canvas, output_start):
        self.start = output_start.clone()

    def on_step(self, state):
        self.steps.append(state)

    def end(self, prediction):
        self.prediction = prediction


def test_history_has_the_prompt_pass_then_a_draft_and_a_verification_per_round(target_run, target, monkeypatch):
    expected = greedy(target, PROMPTS, 12, stop_at_eos=False)
    monkeypatch.setattr(speculative._SpeculativeRun, "_draft",
                        oracle_drafts(expected["ids"], expected["output_start_idx"], 3))
    recorder = Steps()
    out = SpeculativePredictor(12, tokenizer(), stop_at_eos=False).predict(
        prompt_batch(PROMPTS), model=drafter(target_run, 4), frozen={"target": target}, history=recorder)
    steps = recorder.steps
    assert [s.step for s in steps] == list(range(len(steps))) and len(steps) % 2 == 1
    assert steps[0].committed.sum(dim=1).tolist() == [1] * len(PROMPTS)
    # a draft step commits nothing: its tokens are proposals with the drafter's top-k
    assert all(not bool(s.committed.any()) for s in steps[1::2])
    drafted = torch.stack([(s.topk_probs[..., 0] > 0).sum(dim=1) for s in steps[1::2]])  # [rounds, rows]
    accepted = torch.stack([s.committed.sum(dim=1) for s in steps[2::2]])
    assert int(drafted.max()) == 3 and bool((accepted <= drafted + 1).all())
    assert accepted.sum(dim=0).tolist() == [g - 1 for g in out["generated_tokens"]]
    assert drafted.ne(0).sum(dim=0).tolist() == out["draft_passes"]
    final = steps[-1].canvas
    assert torch.equal(final, expected["ids"])


def test_the_history_views_show_drafts_as_proposals_and_the_accepted_prefix_as_commits(target_run, target,
                                                                                      monkeypatch, tmp_path):
    from xdllm.history import HistoryTopKPlugin, format_replay, load_history

    expected = greedy(target, PROMPTS, 12, stop_at_eos=False)
    monkeypatch.setattr(speculative._SpeculativeRun, "_draft",
                        oracle_drafts(expected["ids"], expected["output_start_idx"], 3))
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "history", tokenizer=tokenizer())
    SpeculativePredictor(12, tokenizer(), stop_at_eos=False).predict(
        prompt_batch(PROMPTS), model=drafter(target_run, 4), frozen={"target": target}, history=recorder)
    sample = load_history(recorder.files_written[0]).sample(0)
    assert int(sample.rewritten[1].sum()) == 3 and not bool(sample.committed[1].any())  # the first draft
    assert int(sample.committed[2].sum()) >= 1 and not bool(sample.rewritten[2].any())  # its verification
    assert "3 changed" in format_replay(sample, step=1)
