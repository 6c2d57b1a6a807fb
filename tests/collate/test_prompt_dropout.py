"""Prompt dropout (classifier-free guidance training): a dropped row shows pad tokens where its
prompt was, bos kept, nothing else changed; which rows drop depends on the sample alone."""

import pytest
import torch

from xdllm.data import builtin_tokenizer
from xdllm.interfaces import Example
from xdllm_models.mdlm.collator import MDLMCollator
from xdllm_models.mlm.collator import DefaultMLMCollator, MLMSeq2SeqCollator, MLMSeq2SeqTrainCollator
from xdllm_models.mlm.packed_collator import PackedMLMCollator

TOK = builtin_tokenizer()


def examples(count=64, step=5, first=0):
    generator = torch.Generator().manual_seed(first)
    rows = []
    for index in range(first, first + count):
        prompt = torch.randint(0, 10, (1 + index % 4,), generator=generator).tolist()
        rows.append(Example(prompt_ids=TOK.encode(" ".join(map(str, prompt))),
                            target_ids=TOK.encode(" ".join(map(str, sorted(prompt)))), sample_index=index, step=step))
    return rows


def prompt_columns(collator, batch, samples):
    """Where each row's prompt (after bos) lies, found from the clean rows."""
    columns = torch.zeros_like(batch["target_ids"], dtype=torch.bool)
    for row, sample in enumerate(samples):
        bos = int((batch["target_ids"][row] == TOK.bos_token_id).nonzero()[0])
        columns[row, bos + 1: bos + 1 + len(sample["prompt_ids"])] = True
    return columns


@pytest.mark.parametrize("collator_class", [MLMSeq2SeqTrainCollator, MLMSeq2SeqCollator, MDLMCollator])
def test_a_dropped_row_shows_pad_for_its_prompt_and_nothing_else_changes(collator_class):
    samples = examples()
    plain = collator_class(TOK, seed=7)(samples)
    dropped = collator_class(TOK, seed=7, prompt_dropout=0.5)(samples)
    prompt = prompt_columns(collator_class, plain, samples)
    changed = dropped["input_ids"] != plain["input_ids"]
    rows = changed.any(1)
    assert 16 < int(rows.sum()) < 48  # about half of 64
    assert torch.equal(changed, prompt & rows[:, None])  # whole prompts of the dropped rows, only
    assert bool((dropped["input_ids"][changed] == TOK.pad_token_id).all())
    for key in plain:
        if key != "input_ids":
            assert torch.equal(dropped[key], plain[key]), key  # targets, masks, positions, noise


def test_a_packed_document_drops_its_prompt_as_a_padded_row_does():
    samples = examples()
    padded = MLMSeq2SeqTrainCollator(TOK, seed=7, prompt_dropout=0.5)(samples)
    packed = PackedMLMCollator(TOK, row_length=64, seed=7, prompt_dropout=0.5)(samples)
    plain = PackedMLMCollator(TOK, row_length=64, seed=7)(samples)
    nulls = (packed["input_ids"] == TOK.pad_token_id) & (packed["segment_ids"] >= 0)
    assert int(nulls.sum()) == int(((padded["input_ids"] == TOK.pad_token_id) & padded["attention_mask"]).sum())
    changed = packed["input_ids"] != plain["input_ids"]
    assert torch.equal(changed, nulls) and torch.equal(packed["target_ids"], plain["target_ids"])


def test_whether_a_row_drops_depends_on_the_sample_not_its_batch():
    def nulls(collator, samples):  # pad tokens the rows attend to: their null prompts
        batch = collator(samples)
        return (batch["input_ids"] == TOK.pad_token_id) & batch["attention_mask"]

    collator = MLMSeq2SeqTrainCollator(TOK, seed=7, prompt_dropout=0.5)
    samples = examples()
    together = nulls(collator, samples)
    for row in range(8):
        assert int(nulls(collator, [samples[row]]).sum()) == int(together[row].sum())
    assert not torch.equal(nulls(collator, examples(step=6)).any(1), together.any(1))  # another step, other rows
    other_seed = MLMSeq2SeqTrainCollator(TOK, seed=8, prompt_dropout=0.5)
    assert not torch.equal(nulls(other_seed, samples).any(1), together.any(1))


def test_bad_rates_and_a_collator_without_prompts_are_refused():
    for rate in (-0.1, 1.0):
        with pytest.raises(ValueError, match=r"prompt_dropout must be in \[0, 1\)"):
            MLMSeq2SeqTrainCollator(TOK, prompt_dropout=rate)
        with pytest.raises(ValueError, match=r"prompt_dropout must be in \[0, 1\)"):
            MDLMCollator(TOK, prompt_dropout=rate)
        with pytest.raises(ValueError, match=r"prompt_dropout must be in \[0, 1\)"):
            PackedMLMCollator(TOK, row_length=8, prompt_dropout=rate)
    with pytest.raises(ValueError, match="DefaultMLMCollator supervises every token after bos"):
        DefaultMLMCollator(TOK, prompt_dropout=0.1)
