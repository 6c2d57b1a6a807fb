"""UDLM validation: the training objective and its two terms; exact match and token accuracy where
samples have answers (:class:`~xdllm.evaluate.AnswerEvaluator`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from xdllm.evaluate import AnswerEvaluator
from xdllm.evaluate.evaluation_loss import batch_token_counts
from xdllm.evaluate.totals import count_weighted, with_total_loss
from xdllm.interfaces import LossFunction, MetricSums
from xdllm_models.udlm.loss import CANVAS_COUNT, ENCODER_COUNT

TERMS = ("diffusion_loss", "encoder_loss")


class UDLMEvaluator(AnswerEvaluator):
    """On the loss loader: the loss's two shares, ``diffusion_loss`` (flat CE over the canvas)
    and ``encoder_loss`` (``encoder_weight ·`` the encoder's next-token CE), each the exact mean
    over its tokens in the split, and their sum ``loss`` (the training objective). On the
    prediction loader: exact match and token accuracy of generated answers."""

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        terms = loss_fn(model, batch)
        counts = batch_token_counts(loss_fn, batch)
        return {"diffusion_loss": count_weighted(terms["diffusion_loss"], counts[CANVAS_COUNT]),
                "encoder_loss": count_weighted(terms["encoder_loss"], counts[ENCODER_COUNT])}

    def finalize(self, means: Mapping[str, float]) -> dict[str, float]:
        return with_total_loss(means, TERMS)
