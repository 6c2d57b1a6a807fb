"""AnswerEvaluator's val/loss: per sample by default, exact over the loss's own count with loss_weight."""

import pytest
import torch

from xdllm.data.tokenizer import builtin_tokenizer
from xdllm.evaluate import AnswerEvaluator, MetricTotals

# per-sample token losses of 6 samples with 1, 2, 3, 1, 2, 3 supervised tokens
TOKEN_LOSSES = [[1.0], [2.0, 4.0], [3.0, 3.0, 6.0], [0.5], [1.0, 2.0], [4.0, 4.0, 4.0]]


def _batch_loss(model, batch):
    rows = [TOKEN_LOSSES[i] for i in batch["sample_index"].tolist()]
    tokens = sum(len(row) for row in rows)
    return {"loss": torch.tensor(sum(map(sum, rows)) / tokens), "masked_tokens": torch.tensor(float(tokens))}


def _split_loss(evaluator: AnswerEvaluator, batch_size: int) -> float:
    totals = MetricTotals()
    for start in range(0, len(TOKEN_LOSSES), batch_size):
        indices = torch.arange(start, min(start + batch_size, len(TOKEN_LOSSES)))
        batch = {"input_ids": torch.zeros(len(indices), 4, dtype=torch.long), "sample_index": indices}
        totals.add(evaluator.loss_metrics(torch.nn.Identity(), batch, _batch_loss))
    return totals.means()["loss"]


def test_with_loss_weight_the_loss_is_the_token_mean_for_any_batch_size():
    evaluator = AnswerEvaluator(builtin_tokenizer(), loss_weight="masked_tokens")
    token_mean = sum(map(sum, TOKEN_LOSSES)) / sum(map(len, TOKEN_LOSSES))
    for batch_size in (1, 2, 4, 6):
        assert _split_loss(evaluator, batch_size) == pytest.approx(token_mean, rel=1e-6)


def test_without_it_batches_are_weighted_by_their_samples():
    evaluator = AnswerEvaluator(builtin_tokenizer())
    per_sample = [sum(row) / len(row) for row in TOKEN_LOSSES]
    assert _split_loss(evaluator, 1) == pytest.approx(sum(per_sample) / len(per_sample), rel=1e-6)
    assert _split_loss(evaluator, 6) != pytest.approx(_split_loss(evaluator, 1), rel=1e-3)


def test_a_loss_weight_the_loss_does_not_return_is_named():
    evaluator = AnswerEvaluator(builtin_tokenizer(), loss_weight="tokens")
    with pytest.raises(ValueError, match="loss_weight='tokens' is not an entry of the loss's output, which has: "
                                         "loss, masked_tokens"):
        _split_loss(evaluator, 6)
