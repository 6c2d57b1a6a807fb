"""AnswerEvaluator's val/loss: exact over the loss's own count (loss_weight, or its one token count),
else per sample; the evaluation form of a loss keeps its token counts."""

import copy

import pytest
import torch

from xdllm.data.tokenizer import builtin_tokenizer
from xdllm.evaluate import AnswerEvaluator, MetricTotals
from xdllm.evaluate.evaluation_loss import EvaluationLoss, batch_token_counts
from xdllm.evaluate.totals import count_weighted, with_total_loss

# per-sample token losses of 6 samples with 1, 2, 3, 1, 2, 3 supervised tokens
TOKEN_LOSSES = [[1.0], [2.0, 4.0], [3.0, 3.0, 6.0], [0.5], [1.0, 2.0], [4.0, 4.0, 4.0]]


def _batch_loss(model, batch):
    rows = [TOKEN_LOSSES[i] for i in batch["sample_index"].tolist()]
    tokens = sum(len(row) for row in rows)
    return {"loss": torch.tensor(sum(map(sum, rows)) / tokens), "masked_tokens": torch.tensor(float(tokens))}


class CountingLoss:
    """The same loss as a :class:`~xdllm.interfaces.GlobalCountLoss` (no count in its output)."""

    def token_counts(self, batch):
        return {"tokens": torch.tensor(sum(len(TOKEN_LOSSES[i]) for i in batch["sample_index"].tolist()))}

    def __call__(self, model, batch, context=None):
        return {"loss": _batch_loss(model, batch)["loss"]}


def _split_loss(evaluator: AnswerEvaluator, batch_size: int, loss_fn=_batch_loss) -> float:
    totals = MetricTotals()
    for start in range(0, len(TOKEN_LOSSES), batch_size):
        indices = torch.arange(start, min(start + batch_size, len(TOKEN_LOSSES)))
        batch = {"input_ids": torch.zeros(len(indices), 4, dtype=torch.long), "sample_index": indices}
        totals.add(evaluator.loss_metrics(torch.nn.Identity(), batch, loss_fn))
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


def test_a_loss_with_one_token_count_is_weighted_by_it_through_its_evaluation_form():
    token_mean = sum(map(sum, TOKEN_LOSSES)) / sum(map(len, TOKEN_LOSSES))
    loss_fn = EvaluationLoss(CountingLoss(), frozen={})
    assert loss_fn.context is not None and batch_token_counts(loss_fn, {"sample_index": torch.arange(2)}) == {
        "tokens": torch.tensor(3)}
    for batch_size in (1, 4, 6):
        assert _split_loss(AnswerEvaluator(builtin_tokenizer()), batch_size, loss_fn) == pytest.approx(token_mean,
                                                                                                        rel=1e-6)


def test_a_loss_without_counts_has_none_in_its_evaluation_form():
    loss_fn = EvaluationLoss(_batch_loss)
    assert loss_fn.context is None and batch_token_counts(loss_fn, {}) is None
    assert copy.deepcopy(loss_fn).loss_fn is _batch_loss


def test_a_batch_with_no_tokens_adds_nothing_even_where_its_mean_is_undefined():
    total, count = count_weighted(torch.tensor(float("nan")), torch.tensor(0))
    assert total.item() == 0.0 and count.item() == 0.0


def test_the_total_of_terms_over_different_counts_is_added_only_when_every_term_is_there():
    assert with_total_loss({"a": 1.0, "b": 2.0}, ("a", "b")) == {"a": 1.0, "b": 2.0, "loss": 3.0}
    assert with_total_loss({"exact_match": 1.0}, ("a", "b")) == {"exact_match": 1.0}
