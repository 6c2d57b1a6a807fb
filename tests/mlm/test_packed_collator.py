import pickle

import pytest
import torch

from xdllm.data.packing import plan_packing
from xdllm.data.tokenizer import builtin_tokenizer
from xdllm_models.mlm.collator import MLMSeq2SeqTrainCollator
from xdllm_models.mlm.loss import MLMLoss
from xdllm_models.mlm.model import RotaryTransformerMLMModel
from xdllm_models.mlm.packed_collator import PackedMLMCollator

TOKENIZER = builtin_tokenizer()
ROW_LENGTH = 24


def make_examples(lengths, seed=0, step=3):
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for index, (prompt_length, target_length) in enumerate(lengths):
        ids = torch.randint(4, TOKENIZER.vocab_size, (prompt_length + target_length,), generator=generator)
        examples.append(dict(prompt_ids=ids[:prompt_length].tolist(), target_ids=ids[prompt_length:].tolist(),
                             sample_index=100 + index, step=step))
    return examples


EXAMPLES = make_examples([(3, 9), (0, 14), (5, 2), (2, 11), (1, 3), (4, 6)])


def document_lengths(examples):
    return [len(sample["prompt_ids"]) + len(sample["target_ids"]) + 2 for sample in examples]


def make_model():
    torch.manual_seed(0)
    return RotaryTransformerMLMModel(TOKENIZER.vocab_size, d_model=32, n_layers=2, n_heads=2,
                                     max_positions=64, attn_backend="sdpa").eval()


def test_batch_layout_and_pickle_round_trip():
    batch = PackedMLMCollator(TOKENIZER, ROW_LENGTH, seed=7)(EXAMPLES)
    assert set(batch) == {"input_ids", "target_ids", "positions", "segment_ids"}
    rows = batch["input_ids"].shape[0]
    # Document lengths 14, 16, 9, 15, 6, 12 (72 tokens): best-fit decreasing places
    # 16 | 15 | 14 | 12, then 9 into the 15-row (full) and 6 into the 16-row.
    assert rows == 4
    assert batch["segment_ids"][:, -1].tolist() == [-1, 1, -1, -1]
    for tensor in batch.values():
        assert tensor.shape == (rows, ROW_LENGTH) and tensor.dtype == torch.long
    restored = pickle.loads(pickle.dumps(batch))
    assert all(torch.equal(restored[key], batch[key]) for key in batch)


def test_only_targets_and_eos_are_masked_and_padding_is_inert():
    batch = PackedMLMCollator(TOKENIZER, ROW_LENGTH, seed=7)(EXAMPLES)
    plan = plan_packing(document_lengths(EXAMPLES), ROW_LENGTH)
    masked = batch["input_ids"] == TOKENIZER.mask_token_id
    padding = batch["segment_ids"] == -1
    assert masked.any()
    assert (batch["target_ids"][padding] == TOKENIZER.pad_token_id).all()
    assert (batch["input_ids"][padding] == TOKENIZER.pad_token_id).all()
    # Unmasked slots carry the clean token; the clean documents are bos + prompt + target + eos.
    assert torch.equal(batch["input_ids"][~masked], batch["target_ids"][~masked])
    clean = torch.tensor([token for sample in EXAMPLES for token in
                          [TOKENIZER.bos_token_id, *sample["prompt_ids"], *sample["target_ids"],
                           TOKENIZER.eos_token_id]])
    assert torch.equal(batch["target_ids"], plan.gather(clean, TOKENIZER.pad_token_id))
    prompt_length = torch.tensor([len(sample["prompt_ids"]) for sample in EXAMPLES])
    unsupervised = plan.positions <= prompt_length[plan.document_ids.clamp_min(0)]  # bos and prompt
    assert not masked[unsupervised].any()


def test_noise_matches_the_padded_seq2seq_collator_and_follows_the_seed():
    packed = PackedMLMCollator(TOKENIZER, ROW_LENGTH, seed=7)(EXAMPLES)
    padded = MLMSeq2SeqTrainCollator(TOKENIZER, seed=7)(EXAMPLES)
    plan = plan_packing(document_lengths(EXAMPLES), ROW_LENGTH)
    for document, length in enumerate(document_lengths(EXAMPLES)):
        in_row = packed["input_ids"][plan.document_ids == document]
        assert torch.equal(in_row, padded["input_ids"][document, :length])
    again = PackedMLMCollator(TOKENIZER, ROW_LENGTH, seed=7)(EXAMPLES)
    other_seed = PackedMLMCollator(TOKENIZER, ROW_LENGTH, seed=8)(EXAMPLES)
    assert torch.equal(again["input_ids"], packed["input_ids"])
    assert not torch.equal(other_seed["input_ids"], packed["input_ids"])


def test_packed_rows_give_each_document_its_padded_logits_and_the_same_loss():
    model = make_model()
    packed = PackedMLMCollator(TOKENIZER, ROW_LENGTH, seed=7)(EXAMPLES)
    padded = MLMSeq2SeqTrainCollator(TOKENIZER, seed=7)(EXAMPLES)
    plan = plan_packing(document_lengths(EXAMPLES), ROW_LENGTH)
    loss = MLMLoss(TOKENIZER.mask_token_id)
    with torch.no_grad():
        packed_logits = model(packed["input_ids"], positions=packed["positions"],
                              segment_ids=packed["segment_ids"])
        padded_logits = model(padded["input_ids"], attention_mask=padded["attention_mask"],
                              positions=padded["positions"])
        for document, length in enumerate(document_lengths(EXAMPLES)):
            torch.testing.assert_close(packed_logits[plan.document_ids == document],
                                       padded_logits[document, :length], atol=1e-5, rtol=0)
        packed_loss = loss(model, packed)
        padded_loss = loss(model, padded)
    assert packed_loss["masked_tokens"] == padded_loss["masked_tokens"] > 0
    torch.testing.assert_close(packed_loss["loss"], padded_loss["loss"], atol=1e-5, rtol=0)


def test_changing_one_document_leaves_the_others_untouched():
    model = make_model()
    collator = PackedMLMCollator(TOKENIZER, ROW_LENGTH, seed=7)
    changed = [dict(sample) for sample in EXAMPLES]
    changed[2]["prompt_ids"] = [(token + 1) % 40 + 4 for token in changed[2]["prompt_ids"]]
    plan = plan_packing(document_lengths(EXAMPLES), ROW_LENGTH)
    with torch.no_grad():
        before, after = (model(batch["input_ids"], positions=batch["positions"], segment_ids=batch["segment_ids"])
                         for batch in (collator(EXAMPLES), collator(changed)))
    changed_slots = plan.document_ids == 2
    assert (before[changed_slots] - after[changed_slots]).abs().max() > 1e-4
    torch.testing.assert_close(before[~changed_slots], after[~changed_slots], atol=1e-6, rtol=0)


def test_long_document_chunks_are_separate_segments_with_restarting_positions():
    (example,) = make_examples([(2, 40)])
    batch = PackedMLMCollator(TOKENIZER, ROW_LENGTH)([example])
    assert batch["positions"][:, 0].tolist() == [0, 0]
    assert batch["segment_ids"][0].tolist() == [0] * ROW_LENGTH
    assert batch["segment_ids"][1].tolist() == [0] * 20 + [-1] * 4
    clean = [TOKENIZER.bos_token_id, *example["prompt_ids"], *example["target_ids"], TOKENIZER.eos_token_id]
    assert batch["target_ids"].flatten()[:44].tolist() == clean


def test_target_length_fills_each_document_with_eos_like_the_padded_collator():
    tokenizer = builtin_tokenizer()
    examples = make_examples([(3, 9), (0, 11), (5, 2)])
    packed = PackedMLMCollator(tokenizer, row_length=64, target_length=12)(examples)
    padded = MLMSeq2SeqTrainCollator(tokenizer, target_length=12)(examples)
    eos = tokenizer.eos_token_id
    assert (packed["target_ids"] == eos).sum() == (padded["target_ids"] == eos).sum()
    assert sorted(packed["input_ids"][packed["segment_ids"] >= 0].tolist()) == sorted(
        padded["input_ids"][padded["attention_mask"]].tolist())  # same noise, other layout
    with pytest.raises(ValueError, match="needs add_bos_eos=True"):
        PackedMLMCollator(tokenizer, row_length=64, add_bos_eos=False, target_length=12)


def test_num_rows_pads_batches_to_one_shape_and_the_loss_ignores_the_padding():
    tokenizer = builtin_tokenizer()
    free = PackedMLMCollator(tokenizer, row_length=32, eps=0.5)(EXAMPLES)
    fixed = PackedMLMCollator(tokenizer, row_length=32, eps=0.5, num_rows=6)(EXAMPLES)
    rows = free["input_ids"].shape[0]
    assert rows < 6 and fixed["input_ids"].shape == (6, 32)
    for key in free:
        assert torch.equal(fixed[key][:rows], free[key])
    assert (fixed["segment_ids"][rows:] == -1).all() and (fixed["input_ids"][rows:] == 0).all()
    model = make_model()
    loss = MLMLoss(tokenizer.mask_token_id)
    torch.testing.assert_close(loss(model, fixed)["loss"], loss(model, free)["loss"])
    with pytest.raises(ValueError, match=f"pack into {rows} rows of 32, more than num_rows=1; raise num_rows"):
        PackedMLMCollator(tokenizer, row_length=32, num_rows=1)(EXAMPLES)


def test_bad_examples_are_named():
    with pytest.raises(ValueError, match="row_length must be >= 1"):
        PackedMLMCollator(TOKENIZER, 0)
    with pytest.raises(ValueError, match="example 1 .*has no tokens"):
        PackedMLMCollator(TOKENIZER, 8, add_bos_eos=False)(
            [dict(prompt_ids=[5], target_ids=[], sample_index=0, step=0),
             dict(prompt_ids=[], target_ids=[], sample_index=1, step=0)])
    with pytest.raises(ValueError, match="empty batch"):
        PackedMLMCollator(TOKENIZER, 8)([])
