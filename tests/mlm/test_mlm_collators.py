import pytest
import torch

from xdllm.data.builtin_tasks import SortTask, VarLenCopyTask
from xdllm.data.tasks import example
from xdllm.data.tokenizer import SymbolTokenizer, builtin_tokenizer
from xdllm_models.mlm.collator import (
    DefaultMLMCollator,
    MLMSeq2SeqCollator,
    MLMSeq2SeqPredCollator,
    MLMSeq2SeqTrainCollator,
)

TINY = SymbolTokenizer(["a", "b", "c", "d"])  # a=4 b=5 c=6 d=7; pad 0, mask 1, bos 2, eos 3
TRAINING = (DefaultMLMCollator, MLMSeq2SeqTrainCollator, MLMSeq2SeqCollator)


def _tiny_examples(step=0):
    return [dict(prompt_ids=[4], target_ids=[5, 6], sample_index=0, step=step),
            dict(prompt_ids=[4, 5, 6], target_ids=[7], sample_index=1, step=step)]


def test_right_padded_layouts_by_hand():
    # eps=0.999 masks every supervised token (p >= 0.999): the masked region is visible exactly.
    batch = MLMSeq2SeqTrainCollator(TINY, eps=0.999)(_tiny_examples())
    assert batch["target_ids"].tolist() == [[2, 4, 5, 6, 3, 0], [2, 4, 5, 6, 7, 3]]
    assert batch["input_ids"].tolist() == [[2, 4, 1, 1, 1, 0], [2, 4, 5, 6, 1, 1]]
    assert batch["attention_mask"].tolist() == [[True] * 5 + [False], [True] * 6]
    assert batch["positions"].tolist() == [list(range(6))] * 2
    assert batch["sample_index"].tolist() == [0, 1]
    assert batch["attention_mask"].dtype == torch.bool and batch["input_ids"].dtype == torch.long
    default = DefaultMLMCollator(TINY, eps=0.999)(_tiny_examples())
    assert default["target_ids"].tolist() == batch["target_ids"].tolist()
    assert default["input_ids"].tolist() == [[2, 1, 1, 1, 1, 0], [2, 1, 1, 1, 1, 1]]


def test_target_length_fills_answers_with_supervised_eos():
    batch = MLMSeq2SeqTrainCollator(TINY, eps=0.999, target_length=4)(_tiny_examples())
    assert batch["target_ids"].tolist() == [[2, 4, 5, 6, 3, 3, 0, 0], [2, 4, 5, 6, 7, 3, 3, 3]]
    assert batch["input_ids"].tolist() == [[2, 4, 1, 1, 1, 1, 0, 0], [2, 4, 5, 6, 1, 1, 1, 1]]
    with pytest.raises(ValueError, match="sample 0 has a target of 2 tokens; target_length=2"):
        MLMSeq2SeqTrainCollator(TINY, target_length=2)(_tiny_examples())


def test_both_sides_padding_aligns_prompt_ends_by_hand():
    batch = MLMSeq2SeqCollator(TINY, eps=0.999)(_tiny_examples())
    assert batch["target_ids"].tolist() == [[0, 0, 2, 4, 5, 6, 3], [2, 4, 5, 6, 7, 3, 0]]
    assert batch["input_ids"].tolist() == [[0, 0, 2, 4, 1, 1, 1], [2, 4, 5, 6, 1, 1, 0]]
    assert batch["attention_mask"].tolist() == [[False, False] + [True] * 5, [True] * 6 + [False]]
    assert batch["positions"].tolist() == [[0, 0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5, 6]]


def test_prediction_collator_left_pads_prompts_and_right_pads_targets():
    batch = MLMSeq2SeqPredCollator(TINY)(_tiny_examples())
    assert batch["input_ids"].tolist() == [[0, 0, 2, 4], [2, 4, 5, 6]]
    assert batch["attention_mask"].tolist() == [[False, False, True, True], [True] * 4]
    assert batch["target_ids"].tolist() == [[5, 6, 3], [7, 3, 0]]
    assert batch["sample_index"].tolist() == [0, 1]
    unconditional = MLMSeq2SeqPredCollator(TINY)([dict(prompt_ids=[], target_ids=[4], sample_index=3, step=0)])
    assert unconditional["input_ids"].tolist() == [[2]]


def _varied_examples(count=24, step=0):
    tokenizer = builtin_tokenizer()
    tasks = [SortTask(length=3), SortTask(length=6), VarLenCopyTask(max_length=12)]
    return [example(tasks[i % 3], tokenizer, "train", i, seed=0, step=step) for i in range(count)]


@pytest.mark.parametrize("collator_class", TRAINING)
def test_only_the_supervised_region_is_ever_masked(collator_class):
    tokenizer = builtin_tokenizer()
    examples = _varied_examples()
    batch = collator_class(tokenizer, seed=5)(examples)
    masked = batch["input_ids"] == tokenizer.mask_token_id
    unmasked_equal = torch.where(masked, batch["target_ids"], batch["input_ids"]) == batch["target_ids"]
    assert unmasked_equal.all()
    assert masked.any()
    assert not (masked & ~batch["attention_mask"]).any()  # padding never masked
    assert not (batch["target_ids"] == tokenizer.mask_token_id).any()
    for row, sample in enumerate(examples):
        real = masked[row][batch["attention_mask"][row]]
        assert not real[0]  # bos
        if collator_class is not DefaultMLMCollator:
            assert not real[1:1 + len(sample["prompt_ids"])].any()  # prompt


@pytest.mark.parametrize("collator_class", TRAINING)
def test_the_supervised_mask_is_the_supervised_region(collator_class):
    examples = _varied_examples()
    batch = collator_class(builtin_tokenizer(), seed=5)(examples)
    masked = batch["input_ids"] == builtin_tokenizer().mask_token_id
    assert not (masked & ~batch["supervised_mask"]).any()
    for row, sample in enumerate(examples):
        supervised = batch["supervised_mask"][row][batch["attention_mask"][row]].tolist()
        given = 1 if collator_class is DefaultMLMCollator else 1 + len(sample["prompt_ids"])  # bos (and prompt)
        assert supervised == [False] * given + [True] * (len(supervised) - given)


def _row_tokens(batch, row):
    return batch["input_ids"][row][batch["attention_mask"][row]].tolist()


@pytest.mark.parametrize("collator_class", TRAINING)
def test_same_sample_same_step_same_noise_whatever_the_batch(collator_class):
    examples = _varied_examples()
    collator = collator_class(builtin_tokenizer(), seed=7)
    alone = [_row_tokens(collator([sample]), 0) for sample in examples]
    full = collator(examples)
    assert [_row_tokens(full, row) for row in range(len(examples))] == alone
    reordered = collator(examples[::-1][:10])
    assert [_row_tokens(reordered, row) for row in range(10)] == alone[::-1][:10]
    torch.manual_seed(123)  # the global RNG plays no part
    assert _row_tokens(collator(examples[:1]), 0) == alone[0]


@pytest.mark.parametrize("collator_class", TRAINING)
def test_noise_changes_with_step_seed_and_handles_mixed_steps(collator_class):
    tokenizer = builtin_tokenizer()
    collator = collator_class(tokenizer, seed=7)
    at_step_0 = collator(_varied_examples(step=0))["input_ids"]
    at_step_1 = collator(_varied_examples(step=1))["input_ids"]
    assert not torch.equal(at_step_0, at_step_1)
    assert not torch.equal(at_step_0, collator_class(tokenizer, seed=8)(_varied_examples(step=0))["input_ids"])
    mixed = _varied_examples(step=0)[:4] + _varied_examples(step=1)[4:8]
    rows = [_row_tokens(collator(mixed), row) for row in range(8)]
    assert rows == [_row_tokens(collator([sample]), 0) for sample in mixed]


def test_bad_input_errors_name_the_sample():
    collator = MLMSeq2SeqTrainCollator(TINY, max_length=5)
    with pytest.raises(ValueError, match="empty batch"):
        collator([])
    with pytest.raises(ValueError, match="example 1 has no 'step'"):
        collator([_tiny_examples()[0], dict(prompt_ids=[4], target_ids=[5], sample_index=1)])
    with pytest.raises(ValueError, match="sample 1 has \\[bos\\]\\+prompt\\+target\\+\\[eos\\] of 6 tokens"):
        collator(_tiny_examples())
    with pytest.raises(ValueError, match="sample 1 has \\[bos\\]\\+prompt of 4 tokens"):
        MLMSeq2SeqPredCollator(TINY, max_length=3)(_tiny_examples())
