"""MDLMCollator: prompts are never corrupted, responses are, and the noise belongs to the sample."""

import pytest
import torch

from xdllm.data import builtin_tokenizer
from xdllm.interfaces import Example
from xdllm_models.mdlm.collator import MDLMCollator

TOK = builtin_tokenizer()


def _example(prompt: str, target: str, index: int, step: int = 0) -> Example:
    return Example(prompt_ids=TOK.encode(prompt), target_ids=TOK.encode(target), sample_index=index, step=step)


EXAMPLES = [_example("3 1 2", "1 2 3", 0), _example("9 8 7 6 5", "5 6 7 8 9", 1), _example("4", "4", 2)]


def test_layout_supervises_the_response_and_its_eos_only():
    batch = MDLMCollator(TOK, seed=3)(EXAMPLES)
    row = batch["target_ids"][1].tolist()
    assert row == [TOK.bos_token_id, *TOK.encode("9 8 7 6 5 5 6 7 8 9"), TOK.eos_token_id]
    assert batch["loss_mask"][1].tolist() == [0.0] * 6 + [1.0] * 6
    assert batch["loss_mask"][2].tolist() == [0, 0, 1, 1] + [0] * 8  # short row: right padding unsupervised
    assert batch["attention_mask"][2].tolist() == [True] * 4 + [False] * 8
    # corruption only where supervised, with the mask token, and p_mask the row's level there
    noise = batch["noise_mask"]
    assert not (noise & (batch["loss_mask"] == 0)).any()
    assert torch.equal(batch["input_ids"] == TOK.mask_token_id, noise)
    assert torch.equal(torch.where(noise, batch["target_ids"], batch["input_ids"]), batch["target_ids"])
    for r in range(3):
        levels = batch["p_mask"][r][batch["loss_mask"][r] != 0].unique()
        assert levels.numel() == 1 and 1e-3 <= float(levels) < 1


def test_noise_depends_on_the_sample_only_not_on_its_batch_or_prompt_length():
    collator = MDLMCollator(TOK, seed=3)
    together = collator(EXAMPLES)
    for row, sample in enumerate(EXAMPLES):
        alone = collator([sample])
        width = alone["input_ids"].shape[1]
        assert torch.equal(alone["input_ids"][0], together["input_ids"][row, :width])
    # the same response after another prompt gets the same noise on the response
    moved = collator([_example("1 1 1 1 1 1 1", "1 2 3", 0)])
    assert torch.equal(moved["noise_mask"][0, -4:], together["noise_mask"][0, 4:8])
    other_step = collator([_example("3 1 2", "1 2 3", 0, step=1)])
    many_steps = [collator([_example("3 1 2", "1 2 3", 0, step=s)])["noise_mask"] for s in range(8)]
    assert len({tuple(m[0].tolist()) for m in many_steps}) > 1  # the step changes the draw
    assert other_step["input_ids"].shape == together["input_ids"][:1, :8].shape


def test_blockwise_masks_exactly_round_level_times_block_and_fills_blocks_with_eos():
    collator = MDLMCollator(TOK, seed=0, corruption="blockwise", block_size=4)
    batch = collator([_example("1", "1 2 3 4 5 6", index) for index in range(20)])
    # response = 6 digits + eos = 7 tokens, filled with supervised eos to 8 = 2 blocks of 4
    assert batch["target_ids"].shape[1] == 2 + 8
    assert batch["target_ids"][0, -1].item() == TOK.eos_token_id and batch["loss_mask"][0, -1] == 1
    for row in range(20):
        for start in (2, 6):
            block = slice(start, start + 4)
            level = float(batch["p_mask"][row, block][0])
            assert torch.all(batch["p_mask"][row, block] == level)
            assert int(batch["noise_mask"][row, block].sum()) == min(max(round(level * 4), 0), 4)


def test_target_length_fills_variable_answers_with_supervised_eos():
    batch = MDLMCollator(TOK, target_length=5)([_example("2 1", "1 2", 0), _example("3", "3", 1)])
    assert batch["target_ids"][1].tolist()[2:] == [TOK.encode("3")[0]] + [TOK.eos_token_id] * 4 + [TOK.pad_token_id]
    assert batch["loss_mask"].sum(1).tolist() == [5.0, 5.0]


def test_bad_options_and_overlong_rows_are_clear_errors():
    with pytest.raises(ValueError, match="corruption must be"):
        MDLMCollator(TOK, corruption="gaussian")
    with pytest.raises(ValueError, match="block_size"):
        MDLMCollator(TOK, block_size=0)
    with pytest.raises(ValueError, match="more than max_length=4"):
        MDLMCollator(TOK, max_length=4)(EXAMPLES)
    with pytest.raises(ValueError, match="empty batch"):
        MDLMCollator(TOK)([])
