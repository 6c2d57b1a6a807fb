"""The history of UDLM decoding shows which tokens changed at every step (not only the commits),
in the replay, the TensorBoard cards and a tokens-changed-per-step scalar; revision statistics
say how often a revised token fixed an error."""

import json

import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from udlm_helpers import prompt_batch

from xdllm.cli.main import main
from xdllm.history import HistoryTopKPlugin, format_replay, load_history, write_tensorboard
from xdllm.history.reader import SampleHistory
from xdllm.history.revisions import count_revisions
from xdllm_models.udlm.predictor import UDLMPredictor

PAD, MASK, EOS = 0, 1, 3


def test_history_shows_tokens_changed_per_step(tokenizer, tiny_model, tmp_path):
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "history", tokenizer=tokenizer)
    UDLMPredictor(8, 4, tokenizer=tokenizer, model=tiny_model, steps_per_block=5, stop_when_unchanged=False,
                  stop_at_eos=False).predict(prompt_batch(tokenizer, [[4, 5, 6], [7]]), history=recorder)
    sample = load_history(recorder.files_written[0]).sample(0)
    before = torch.cat([sample.initial_canvas[None], sample.canvas[:-1]])
    assert torch.equal(sample.changed, sample.canvas != before)
    assert sample.tokens_changed[0] == 4  # the first step writes the whole first block
    assert bool(sample.rewritten.any())  # tokens changed between commits
    assert not bool((sample.rewritten & sample.committed).any())
    replay = format_replay(sample)
    assert " changed, " in replay and "~" in replay
    logdir = tmp_path / "tensorboard"
    write_tensorboard(tmp_path / "history", logdir, max_samples=0, tokenizer=tokenizer)  # scalars only
    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    assert "generation/tokens_changed_per_step/mean" in events.Tags()["scalars"]
    logged = {e.step: e.value for e in events.Scalars("generation/tokens_changed_per_step/max")}
    assert logged[0] == 4.0


def _history(canvas: list[list[int]], committed: list[list[bool]], target: list[int]) -> SampleHistory:
    steps, region = len(canvas), len(canvas[0])
    return SampleHistory(
        sample_id=0, output_start=1, steps=torch.arange(steps),
        topk_ids=torch.zeros(steps, region, 1, dtype=torch.long),
        topk_probs=torch.zeros(steps, region, 1), canvas=torch.tensor(canvas), committed=torch.tensor(committed),
        initial_canvas=torch.full((region,), MASK), commit_step=torch.zeros(region, dtype=torch.long),
        confidence_at_commit=torch.zeros(region), prompt_ids=torch.tensor([2]), target_ids=torch.tensor(target),
        text=None, mask_token_id=MASK, vocab={}, eos_token_id=EOS, pad_token_id=PAD)


def test_a_revision_that_fixes_an_error_is_counted():
    # target a c <eos>: the first pass writes a b <eos> e, the second fixes b -> c, the third breaks a -> d
    # and changes e (after the EOS, not scored)
    a, b, c, d, e = 4, 5, 6, 7, 8
    sample = _history([[a, b, EOS, e], [a, c, EOS, e], [d, c, EOS, b]],
                      [[False] * 4, [False] * 4, [True] * 4], [a, c, EOS])
    counts = count_revisions([sample]).summary()
    assert counts["revisions"] == 3 and counts["revised_positions"] == 3
    assert counts["scored_revised_positions"] == 2
    assert counts["fixed"] == 1 and counts["broken"] == 1 and counts["fixed_share"] == 0.5


def test_a_token_taken_back_and_rewritten_is_a_revision():
    # remasking: the first step writes a; the second takes it back (masks it) and writes c, e; the
    # third writes b where a was (fixed) and takes e back; the last writes e again (not a revision)
    a, b, c, e = 4, 5, 6, 8
    sample = _history([[a, MASK, MASK], [MASK, c, e], [b, c, MASK], [b, c, e]],
                      [[True, False, False], [False, True, True], [True, False, False], [False, False, True]],
                      [b, c, e])
    counts = count_revisions([sample]).summary()
    assert counts["taken_back"] == 2
    assert counts["revisions"] == 1 and counts["revised_positions"] == 1
    assert counts["fixed"] == 1 and counts["broken"] == 0


def test_masked_diffusion_never_revises():
    # tokens appear once, at their commit; padding after a settled EOS is not a revision
    a, b = 4, 5
    sample = _history([[a, MASK, MASK], [a, EOS, b], [a, EOS, PAD]],
                      [[True, False, False], [False, True, True], [False, False, False]], [a, EOS])
    counts = count_revisions([sample]).summary()
    assert counts["revisions"] == 0 and counts["fixed"] == 0 and counts["taken_back"] == 0
    assert not bool(sample.rewritten.any())



def test_history_revisions_command_counts_the_newest_generation(tokenizer, tiny_model, tmp_path, capsys):
    for name, steps in (("20260101-000000", 1), ("20260101-000001", 5)):  # the second is the newest
        folder = tmp_path / "run" / "generate" / name / "history"
        recorder = HistoryTopKPlugin(k=2, output_dir=folder, tokenizer=tokenizer)
        UDLMPredictor(8, 4, tokenizer=tokenizer, model=tiny_model, steps_per_block=steps, stop_when_unchanged=False,
                      stop_at_eos=False).predict(prompt_batch(tokenizer, [[4, 5, 6], [7]]), history=recorder)
    newest = [load_history(f).sample(i) for f in recorder.files_written for i in range(2)]
    assert main(["history", "revisions", str(tmp_path / "run")]) == 0
    printed = capsys.readouterr()
    assert json.loads(printed.out) == count_revisions(newest).summary()
    assert json.loads(printed.out)["revisions"] > 0 and "20260101-000001" in printed.err
    assert main(["history", "revisions", str(tmp_path / "missing")]) == 1
    assert "missing" in capsys.readouterr().err


def test_positions_of_blocks_not_reached_are_not_listed_with_empty_top_k(tokenizer, tiny_model, tmp_path):
    from xdllm.history.render import step_views

    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "history", tokenizer=tokenizer)
    UDLMPredictor(8, 4, tokenizer=tokenizer, model=tiny_model, steps_per_block=2, stop_when_unchanged=False,
                  stop_at_eos=False).predict(prompt_batch(tokenizer, [[4, 5, 6]]), history=recorder)
    sample = load_history(recorder.files_written[0]).sample(0)
    first = step_views(sample)[0]  # the first block's first step: the second block is still masked
    assert first.unscored_masked == 4 and first.masks_remaining == 4 and first.hidden_masked == 0
    assert all(any(p > 0 for _, p in position.alternatives) for position in first.positions)
    assert "4 masked positions of later blocks, not scored at this step" in format_replay(sample)


def test_the_replay_counts_one_thing_in_the_singular(tokenizer, tiny_model, tmp_path):
    """Two blocks of one token, one step each: the first step leaves one position of the second
    block unscored, and a sample of one block has one step (these lines said "1 masked
    positions", "1 steps ... = 1 forward passes")."""
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "history", tokenizer=tokenizer)
    for length in (2, 1):
        UDLMPredictor(length, 1, tokenizer=tokenizer, model=tiny_model, steps_per_block=1, stop_when_unchanged=False,
                      stop_at_eos=False).predict(prompt_batch(tokenizer, [[4, 5, 6]]), history=recorder)
    two_blocks, one_block = (format_replay(load_history(path).sample(0)) for path in recorder.files_written)
    assert "  ... 1 masked position of later blocks, not scored at this step" in two_blocks
    assert "masked positions" not in two_blocks
    assert ": 1 step (0) = 1 forward pass;" in one_block
