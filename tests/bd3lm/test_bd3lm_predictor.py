"""BD3-LM generation: block by block over a KV cache, token-identical to recomputing the prefix."""

import pytest
import torch
from bd3lm_helpers import prompt_batch, random_network
from predict_fakes import EOS, PAD

from xdllm.collate import PromptCollator
from xdllm_models.bd3lm.predictor import BD3LMPredictor

PROMPTS = [[4, 5, 6], [7], [8, 9, 10, 11, 12, 13], [14, 15], [], [16, 17, 18, 19, 4]]


def _eos_prone(tokenizer, seed=0):
    """A random network whose EOS logit is raised, so rows stop at different blocks."""
    model = random_network(tokenizer.vocab_size, seed=seed)
    with torch.no_grad():
        model.lm_head.weight[EOS] *= 2.0
    return model


def _generate(model, tokenizer, batch, **options):
    options = {"max_new_tokens": 11, "block_size": 4, "tokenizer": tokenizer, "stop_at_eos": False, **options}
    return BD3LMPredictor(**options).predict(batch, model=model)


OPTION_SETS = [
    {"block_size": 1},
    {"block_size": 2, "confidence": "prob_diff"},
    {"block_size": 4, "confidence": "entropy", "steps_per_block": 2},
    {"block_size": 4, "threshold": 0.3, "stop_at_eos": True},
    {"block_size": 5, "confidence": None, "temperature": 1.0, "top_k": 5},
    {"block_size": 16, "noise_schedule": "cosine", "temperature": 0.7, "top_p": 0.9, "stop_at_eos": True},
    {"block_size": 4, "remask": True},
    {"block_size": 8, "steps_per_block": 4, "threshold": 0.2, "remask": True, "stop_at_eos": True},
    {"block_size": 4, "entropy_budget": 1.0, "temperature": 1.0},
]


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_cached_generation_equals_recomputing_the_prefix(tokenizer, options):
    model = _eos_prone(tokenizer)
    for prompts in (PROMPTS, PROMPTS[2:4], PROMPTS[4:]):
        batch = prompt_batch(tokenizer, prompts)
        cached = _generate(model, tokenizer, batch, **options)
        recomputed = _generate(model, tokenizer, batch, use_cache=False, **options)
        assert torch.equal(cached["ids"], recomputed["ids"])
        assert cached["steps_taken"] == recomputed["steps_taken"]
        assert not (cached["ids"] == tokenizer.mask_token_id).any()


def test_right_padded_prompts_give_the_tokens_of_left_padded_ones(tokenizer):
    model = _eos_prone(tokenizer)
    left = prompt_batch(tokenizer, PROMPTS)
    lengths = left["attention_mask"].sum(1)
    width = left["input_ids"].shape[1]
    shift = (torch.arange(width) + (width - lengths)[:, None]) % width  # roll each row's tokens to the front
    right = {**left, "input_ids": left["input_ids"].gather(1, shift),
             "attention_mask": left["attention_mask"].gather(1, shift)}
    for use_cache in (True, False):
        expected = _generate(model, tokenizer, left, use_cache=use_cache, stop_at_eos=True)
        got = _generate(model, tokenizer, right, use_cache=use_cache, stop_at_eos=True)
        assert got["text"] == expected["text"] and got["steps_taken"] == expected["steps_taken"]


def test_a_sample_decodes_the_same_alone_and_in_any_batch(tokenizer):
    model = _eos_prone(tokenizer)
    options = {"temperature": 1.0, "threshold": 0.5, "stop_at_eos": True}
    together = _generate(model, tokenizer, prompt_batch(tokenizer, PROMPTS), **options)
    for index, prompt in enumerate(PROMPTS):
        alone = _generate(model, tokenizer, prompt_batch(tokenizer, [prompt], first_index=index), **options)
        assert alone["text"] == [together["text"][index]]
        assert alone["steps_taken"] == [together["steps_taken"][index]]


def test_rows_stop_at_eos_and_keep_what_they_wrote_before_it(tokenizer):
    model = _eos_prone(tokenizer)
    batch = prompt_batch(tokenizer, PROMPTS)
    stopped = _generate(model, tokenizer, batch, stop_at_eos=True, max_new_tokens=16)
    full = _generate(model, tokenizer, batch, stop_at_eos=False, max_new_tokens=16)
    start = int(stopped["output_start_idx"][0])
    region_stopped, region_full = stopped["ids"][:, start:], full["ids"][:, start:]
    stopped_early = [steps < 16 for steps in stopped["steps_taken"]]
    assert any(stopped_early) and not all(stopped_early)  # rows stop in different blocks
    for row, steps in enumerate(stopped["steps_taken"]):
        tokens = region_stopped[row].tolist()
        if EOS not in tokens:
            assert steps == 16
            continue
        first = tokens.index(EOS)
        assert tokens[: first + 1] == region_full[row, : first + 1].tolist()
        assert set(tokens[first + 1:]) <= {PAD}
        assert 4 * (first // 4) < steps <= 4 * (first // 4 + 1)  # the blocks up to the EOS's, no more


class _Recorder:
    k = 3

    def __init__(self):
        self.steps = []

    def begin(self, batch, canvas, output_start):
        self.width = canvas.shape[1] - int(output_start.min())

    def on_step(self, state):
        self.steps.append(state)

    def end(self, prediction):
        self.prediction = prediction


def test_the_history_recorder_sees_every_step_of_every_block(tokenizer):
    model = _eos_prone(tokenizer)
    recorder = _Recorder()
    batch = prompt_batch(tokenizer, PROMPTS[:3])
    prediction = BD3LMPredictor(11, 4, tokenizer=tokenizer, stop_at_eos=False).predict(batch, model, recorder)
    assert [state.step for state in recorder.steps] == list(range(11))  # 4 + 4 + 3 steps, one token each
    committed = torch.stack([state.committed for state in recorder.steps])  # [step, row, offset]
    assert torch.equal(committed.sum(0), torch.ones(3, 11, dtype=torch.long))  # each offset once
    for index, state in enumerate(recorder.steps):
        block = index // 4
        outside = torch.ones(11, dtype=torch.bool)
        outside[block * 4:(block + 1) * 4] = False
        assert not state.committed[:, outside].any() and not state.topk_probs[:, outside].any()
        assert (state.topk_probs[:, ~outside].sum(-1) > 0).all() and state.active.all()
    assert torch.equal(recorder.steps[-1].canvas, prediction["ids"])


def test_remasking_takes_tokens_back_inside_the_block_and_keeps_its_schedule(tokenizer):
    model = _eos_prone(tokenizer)
    batch = prompt_batch(tokenizer, PROMPTS)
    plain, remasking = _Recorder(), _Recorder()
    options = dict(max_new_tokens=12, block_size=6, steps_per_block=4, tokenizer=tokenizer, stop_at_eos=False)
    BD3LMPredictor(**options).predict(batch, model, plain)
    prediction = BD3LMPredictor(remask=True, **options).predict(batch, model, remasking)
    masks = [[int((state.canvas == tokenizer.mask_token_id).sum()) for state in recorder.steps]
             for recorder in (plain, remasking)]
    assert masks[0] == masks[1]
    before = torch.stack([state.canvas for state in remasking.steps[:-1]])
    after = torch.stack([state.canvas for state in remasking.steps[1:]])
    taken_back = (before != tokenizer.mask_token_id) & (after == tokenizer.mask_token_id)
    assert taken_back.any()
    steps, rows, columns = taken_back.nonzero(as_tuple=True)
    block = (columns - remasking.steps[0].output_start[rows]) // 6
    assert torch.equal(block, (steps + 1) // 4)  # only inside the block being denoised
    assert not (prediction["ids"] == tokenizer.mask_token_id).any()


def test_the_prompt_and_each_finished_block_are_encoded_once(tokenizer):
    model = _eos_prone(tokenizer)
    fed = []
    handle = model.register_forward_pre_hook(lambda module, args, kwargs: fed.append(args[0].shape),
                                             with_kwargs=True)
    batch = prompt_batch(tokenizer, PROMPTS)
    _generate(model, tokenizer, batch, max_new_tokens=12, block_size=4, steps_per_block=2)
    handle.remove()
    prompt_len = batch["input_ids"].shape[1]
    assert [shape[1] for shape in fed] == [prompt_len + 4, 4, 4 + 4, 4, 4 + 4, 4]
    assert all(shape[0] == len(PROMPTS) for shape in fed)


def test_positions_beyond_the_network_are_a_clear_error(tokenizer):
    model = random_network(tokenizer.vocab_size, max_positions=16)
    with pytest.raises(ValueError, match="max_positions=16"):
        _generate(model, tokenizer, prompt_batch(tokenizer, [[4, 5, 6]]), max_new_tokens=13)


def test_bad_options_are_refused(tokenizer):
    with pytest.raises(ValueError, match="block_size"):
        BD3LMPredictor(8, 0, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="steps_per_block"):
        BD3LMPredictor(8, 4, steps_per_block=0, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="threshold"):
        BD3LMPredictor(8, 4, confidence=None, threshold=0.5, tokenizer=tokenizer)
    batch = PromptCollator(tokenizer)([{"prompt_ids": [4], "target_ids": [], "sample_index": 0, "step": 0}])
    with pytest.raises(ValueError, match="does not infill"):
        BD3LMPredictor(8, 4, tokenizer=tokenizer).predict({**batch, "infill": True}, model=random_network(20))


def test_an_entropy_budget_reaches_the_blocks(tokenizer):
    model = _eos_prone(tokenizer)
    batch = prompt_batch(tokenizer, PROMPTS)
    one_per_step = _generate(model, tokenizer, batch, entropy_budget=0.0)
    everything = _generate(model, tokenizer, batch, entropy_budget=1e9)  # each block in one pass
    assert one_per_step["steps_taken"] == [11] * len(PROMPTS)  # 11 slots, nothing certain
    assert everything["steps_taken"] == [3] * len(PROMPTS)  # blocks of 4 over 11 slots
