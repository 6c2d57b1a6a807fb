"""UDLM validation: the training objective and its two terms; exact match and token accuracy where
samples have answers (:class:`~xdllm.evaluate.AnswerEvaluator`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from xdllm.evaluate import AnswerEvaluator
from xdllm.interfaces import LossFunction, MetricSums

TERMS = ("loss", "diffusion_loss", "encoder_loss")


class UDLMEvaluator(AnswerEvaluator):
    """On the loss loader: ``loss``, ``diffusion_loss`` (flat CE over the canvas) and
    ``encoder_loss`` (the encoder's next-token CE), each the batch's value with its own counts,
    weighted by its samples as every family logs its loss. On the prediction loader: exact
    match and token accuracy of generated answers."""

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        terms = loss_fn(model, batch)
        samples = torch.tensor(float(batch["input_ids"].shape[0]), dtype=torch.float64,
                               device=terms["loss"].device)
        return {name: (terms[name].detach().double() * samples, samples) for name in TERMS}
