"""UDLM validation: the training objective and its two terms; exact match and token accuracy where
samples have answers (:class:`~xdllm.evaluate.AnswerEvaluator`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from xdllm.evaluate import AnswerEvaluator
from xdllm.evaluate.evaluation_loss import batch_token_counts, count_weighted, with_total_loss
from xdllm.interfaces import LossFunction, MetricSums, Tokenizer
from xdllm_models.udlm.loss import CANVAS_COUNT, ENCODER_COUNT

TERMS = ("diffusion_loss", "encoder_loss")


class UDLMEvaluator(AnswerEvaluator):
    """On the loss loader: ``diffusion_loss`` (flat CE over the canvas) and ``encoder_loss`` (the
    encoder's next-token CE), each the exact mean over its tokens in the split, and ``loss``
    (the training objective, ``diffusion_loss + encoder_weight · encoder_loss``). On the
    prediction loader: exact match and token accuracy of generated answers.

    Args:
        encoder_weight: the loss's (``udlm.encoder_weight``); a loss with another weight is
            refused, naming both.
    """

    def __init__(self, tokenizer: Tokenizer, encoder_weight: float = 1.0) -> None:
        super().__init__(tokenizer)
        if not encoder_weight >= 0.0:
            raise ValueError(f"UDLMEvaluator: encoder_weight must be >= 0, got {encoder_weight}")
        self.encoder_weight = encoder_weight

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        loss_weight = getattr(loss_fn, "encoder_weight", self.encoder_weight)
        if loss_weight != self.encoder_weight:
            raise ValueError(f"UDLMEvaluator: encoder_weight={self.encoder_weight} but the loss weighs the encoder "
                             f"term by {loss_weight}; set evaluator.encoder_weight to the loss's "
                             "(udlm.encoder_weight sets both)")
        terms = loss_fn(model, batch)
        counts = batch_token_counts(loss_fn, batch)
        return {"diffusion_loss": count_weighted(terms["diffusion_loss"], counts[CANVAS_COUNT]),
                "encoder_loss": count_weighted(terms["encoder_loss"], counts[ENCODER_COUNT])}

    def finalize(self, means: Mapping[str, float]) -> dict[str, float]:
        return with_total_loss(means, TERMS, (1.0, self.encoder_weight))
