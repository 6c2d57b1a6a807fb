"""DFlash validation: the loss and the draft accuracy per block position; speculative decoding's
acceptance length and target passes per token; exact match (the target's: decoding is greedy).

The per-position accuracy ``val/draft_acc_pos_k`` (``k = 1 .. block_size - 1``, zero-padded so
the names sort: ``pos_01 .. pos_15`` at block size 16) is the ``draft_correct_per_pos /
draft_count_per_pos`` of ``DFlashDecayLoss`` over the whole split; the
harness also draws them as one curve over the block's positions per validation
(``val/draft_acc_by_position`` in TensorBoard's images, from :meth:`DFlashEvaluator.curves`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from xdllm.evaluate import AnswerEvaluator
from xdllm.evaluate.totals import count_weighted
from xdllm.interfaces import LossFunction, MetricSums, PredictionDict, Tokenizer
from xdllm_models.dflash.loss import draft_counts_per_position, position_metric

COST_KEYS = ("target_passes", "draft_passes", "generated_tokens")


class DFlashEvaluator(AnswerEvaluator):
    """On the loss loader: ``loss``, ``draft_accuracy`` and ``draft_acc_pos_k``, each weighted by
    its count of supervised drafted positions, so they are exact over the split.
    On the prediction loader, from the speculative predictor's costs: ``acceptance_length``
    (tokens committed per verification pass: accepted drafts plus the target's token; the
    prompt pass and its token are left out) and ``target_passes_per_token`` (every target pass,
    the prompt's included, per generated token); plus exact match and token accuracy.

    Args:
        block_size: the drafter's block size (how many per-position accuracies there are).
    """

    def __init__(self, tokenizer: Tokenizer, block_size: int = 8) -> None:
        super().__init__(tokenizer)
        if block_size < 2:
            raise ValueError(f"DFlashEvaluator: block_size must be >= 2, got {block_size}")
        self.block_size = block_size

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        out = loss_fn(model, batch)
        metrics = dict(self.loss_metrics_of(out, batch, loss_fn))
        counts = draft_counts_per_position(batch, self.block_size).to(out["loss"].device, torch.float64)
        metrics["draft_accuracy"] = count_weighted(out["draft_accuracy"], counts.sum())
        for offset in range(1, self.block_size):
            name = position_metric(offset, self.block_size)
            metrics[name] = count_weighted(out[name], counts[offset - 1])
        return metrics

    def prediction_metrics(self, batch: Mapping[str, Any], prediction: PredictionDict) -> MetricSums:
        metrics = dict(super().prediction_metrics(batch, prediction))
        if not all(key in prediction for key in COST_KEYS):
            return metrics
        device = prediction["ids"].device
        target = torch.tensor(prediction["target_passes"], dtype=torch.float64, device=device)
        generated = torch.tensor(prediction["generated_tokens"], dtype=torch.float64, device=device)
        metrics["acceptance_length"] = ((generated - 1).sum(), (target - 1).sum())
        metrics["target_passes_per_token"] = (target.sum(), generated.sum())
        return metrics

    def curves(self, values: Mapping[str, float]) -> dict[str, list[tuple[float, float]]]:
        """``draft_acc_by_position``: the accuracy at offsets ``1 .. block_size - 1``, drawn by
        the harness as one curve per validation."""
        names = {k: position_metric(k, self.block_size) for k in range(1, self.block_size)}
        points = [(float(k), values[name]) for k, name in names.items() if name in values]
        return {"draft_acc_by_position": points}

    def records(self, batch: Mapping[str, Any], prediction: PredictionDict) -> list[dict[str, Any]]:
        records = super().records(batch, prediction)
        for key in COST_KEYS:
            if key in prediction:
                for record, value in zip(records, prediction[key]):
                    record[key] = value
        return records
