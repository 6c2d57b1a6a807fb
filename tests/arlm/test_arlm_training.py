"""ARLM rows, the causal network on them, and the next-token loss against a hand computation."""

import math

import pytest
import torch
from arlm_helpers import examples

from xdllm.interfaces import LossContext
from xdllm_models.arlm.collator import ARLMCollator, PackedARLMCollator
from xdllm_models.arlm.loss import ARLMLoss
from xdllm_models.arlm.metrics import ARLMEvaluator

PROMPTS = [[4, 5, 6], [], [7, 8]]
TARGETS = [[9, 10], [11, 12, 13, 14], [15]]


def test_rows_are_bos_prompt_target_eos_and_only_the_response_is_supervised(tokenizer):
    batch = ARLMCollator(tokenizer)(examples(PROMPTS, TARGETS))
    bos, eos, pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    assert batch["input_ids"].tolist() == [[bos, 4, 5, 6, 9, 10, eos], [bos, 11, 12, 13, 14, eos, pad],
                                           [bos, 7, 8, 15, eos, pad, pad]]
    assert batch["loss_mask"].int().tolist() == [[0, 0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1, 0],
                                                 [0, 0, 0, 1, 1, 0, 0]]
    assert batch["attention_mask"].int().tolist() == [[1] * 7, [1] * 6 + [0], [1] * 5 + [0, 0]]
    assert batch["sample_index"].tolist() == [0, 1, 2]


def test_eos_fill_and_too_long_rows(tokenizer):
    batch = ARLMCollator(tokenizer, target_length=4)(examples([[4]], [[9]]))
    assert batch["input_ids"][0, 2:].tolist() == [9] + [tokenizer.eos_token_id] * 3
    with pytest.raises(ValueError, match="sample 0 has .* of 7 tokens, more than max_length=6"):
        ARLMCollator(tokenizer, max_length=6)(examples(PROMPTS[:1], TARGETS[:1]))


def hand_loss(model, batch) -> float:
    """Mean over supervised tokens of -log softmax(logits at the previous column)[token], one by one."""
    with torch.no_grad():
        logits = model(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                       positions=batch.get("positions"), segment_ids=batch.get("segment_ids")).double()
    total, count = 0.0, 0
    for row in range(batch["input_ids"].shape[0]):
        for column in range(1, batch["input_ids"].shape[1]):
            if batch["loss_mask"][row, column]:
                token = int(batch["input_ids"][row, column])
                total -= float(logits[row, column - 1].log_softmax(-1)[token])
                count += 1
    return total / count


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_loss_is_the_hand_computed_next_token_cross_entropy(tiny_model, tokenizer, chunk_size):
    batch = ARLMCollator(tokenizer)(examples(PROMPTS, TARGETS))
    out = ARLMLoss(chunk_size=chunk_size)(tiny_model, batch)
    assert out["loss"].item() == pytest.approx(hand_loss(tiny_model, batch), rel=1e-5)
    assert out["supervised_tokens"].item() == 3 + 5 + 2


def test_final_hidden_is_causal_like_the_forward(tiny_model, tokenizer):
    batch = ARLMCollator(tokenizer)(examples(PROMPTS, TARGETS))
    with torch.no_grad():
        logits = tiny_model(batch["input_ids"], attention_mask=batch["attention_mask"])
        projected = tiny_model.lm_head(tiny_model.final_hidden(batch["input_ids"],
                                                               attention_mask=batch["attention_mask"]))
    torch.testing.assert_close(projected, logits)


def test_the_global_count_is_the_denominator(tiny_model, tokenizer):
    batch = ARLMCollator(tokenizer)(examples(PROMPTS, TARGETS))
    loss = ARLMLoss()
    counts = loss.token_counts(batch)
    assert counts["num_ar_tokens"].item() == 10
    local = loss(tiny_model, batch)["loss"]
    doubled = loss(tiny_model, batch, context=LossContext(counts={"num_ar_tokens": counts["num_ar_tokens"] * 2}))
    torch.testing.assert_close(doubled["loss"], local / 2)


def test_later_tokens_do_not_change_earlier_logits(tiny_model):
    ids = torch.tensor([[2, 4, 5, 6, 7, 8, 9, 10]])
    perturbed = ids.clone()
    perturbed[0, 5:] = torch.tensor([15, 16, 17])
    a, b = tiny_model(ids), tiny_model(perturbed)
    torch.testing.assert_close(a[:, :5], b[:, :5], rtol=0, atol=0)
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_packed_rows_keep_documents_apart_and_give_the_padded_loss(tiny_model, tokenizer):
    samples = examples(PROMPTS, TARGETS)
    padded = ARLMCollator(tokenizer)(samples)
    packed = PackedARLMCollator(tokenizer, row_length=16)(samples)
    assert packed["input_ids"].shape == (2, 16)  # 7 + 6 + 5 tokens: best fit puts two in one row
    assert packed["loss_mask"].sum() == padded["loss_mask"].sum()
    loss = ARLMLoss()
    torch.testing.assert_close(loss(tiny_model, packed)["loss"], loss(tiny_model, padded)["loss"],
                               atol=1e-5, rtol=1e-5)
    # Changing one packed document leaves the logits of the others unchanged.
    segments = packed["segment_ids"]
    changed = packed["input_ids"].clone()
    target_doc = (segments[0] == 1)
    changed[0, target_doc] = 16
    a = tiny_model(packed["input_ids"], positions=packed["positions"], segment_ids=segments)
    b = tiny_model(changed, positions=packed["positions"], segment_ids=segments)
    others = segments[0] != 1
    torch.testing.assert_close(a[0, others], b[0, others], rtol=0, atol=0)


def test_split_documents_do_not_supervise_a_chunk_start(tokenizer):
    batch = PackedARLMCollator(tokenizer, row_length=4)(examples([[]], [[4, 5, 6, 7, 8]]))
    # [bos 4 5 6] [7 8 eos]: 7 starts a chunk, it has nothing before it in its row
    assert batch["input_ids"].tolist() == [[2, 4, 5, 6], [7, 8, 3, 0]]
    assert batch["loss_mask"].int().tolist() == [[0, 1, 1, 1], [0, 1, 1, 0]]


@pytest.mark.parametrize("options, message", [
    ({"row_length": 1}, "row_length must be >= 2"),
    ({"row_length": 8, "num_rows": 0}, "num_rows must be >= 1"),
    ({"row_length": 8, "target_length": 0}, "target_length must be >= 1"),
])
def test_packed_collator_options_are_checked(tokenizer, options, message):
    with pytest.raises(ValueError, match=message):
        PackedARLMCollator(tokenizer, **options)


def test_evaluator_gives_the_exact_nll_per_token_and_its_perplexity(tiny_model, tokenizer):
    evaluator = ARLMEvaluator(tokenizer)
    batches = [ARLMCollator(tokenizer)(examples(PROMPTS[:2], TARGETS[:2])),
               ARLMCollator(tokenizer)(examples(PROMPTS[2:], TARGETS[2:], first_index=2))]
    sums = [evaluator.loss_metrics(tiny_model, b, loss_fn=ARLMLoss()) for b in batches]
    nll = sum(s["nll"][0] for s in sums) / sum(s["nll"][1] for s in sums)
    everything = ARLMCollator(tokenizer)(examples(PROMPTS, TARGETS))
    assert nll.item() == pytest.approx(hand_loss(tiny_model, everything), rel=1e-5)
    loss = sum(s["loss"][0] for s in sums) / sum(s["loss"][1] for s in sums)  # not a mean of batch means
    assert loss.item() == pytest.approx(nll.item(), rel=1e-12)
    values = evaluator.finalize({"nll": nll.item()})
    assert values["ppl"] == pytest.approx(math.exp(nll.item()))
    assert evaluator.finalize({"nll": 800.0})["ppl"] == math.inf
