"""Hybrid validation: the training objective and the causal branch's exact NLL and perplexity;
exact match and token accuracy where samples have answers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Bool, Integer
from torch import Tensor

from xdllm.evaluate import AnswerEvaluator
from xdllm.interfaces import LossFunction, MetricSums, Tokenizer
from xdllm.losses.token_nll import next_token_nll
from xdllm_models.hybrid.loss import HybridLoss

MAX_EXPONENT = 700.0
"""``exp`` of more than this overflows a float; the perplexity is then reported as inf."""


class HybridEvaluator(AnswerEvaluator):
    """From one forward pass over ``[x_t | x_0]`` per batch: ``loss`` (the batch's objective
    with its own counts, weighted by its samples, as every family logs it), ``ar_loss`` and
    ``diffusion_loss`` (its two terms), and ``nll``, the causal branch's exact NLL per response
    token through the first EOS over the whole split (nats; the block fill after it is not
    counted, so this is ARLM's ``val/nll`` on the same samples), with ``ppl = exp(nll)`` added
    by :meth:`finalize`. On the prediction loader: exact match and token accuracy of generated
    answers.

    Args:
        tokenizer: pad and eos ids (answers).
        block_size, alpha: as in :class:`~xdllm_models.hybrid.loss.HybridLoss` (the training loss).
    """

    def __init__(self, tokenizer: Tokenizer, block_size: int, alpha: float = 1.0) -> None:
        super().__init__(tokenizer)
        self.loss = HybridLoss(block_size=block_size, alpha=alpha)

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        logits = self.loss.branch_logits(model, batch)
        terms = self.loss.objective_terms(logits, batch)
        supervised = _through_first_eos(batch["target_ids"], batch["loss_mask"] != 0, self.tokenizer.eos_token_id)
        supervised = supervised[:, 1:]
        nll = torch.where(supervised, next_token_nll(logits.causal.float(), batch["target_ids"]), 0.0)
        samples = torch.tensor(float(batch["input_ids"].shape[0]), dtype=torch.float64, device=nll.device)
        return {"loss": (terms.total_loss.detach().double() * samples, samples),
                "diffusion_loss": (terms.dllm_loss.double() * samples, samples),
                "ar_loss": ((terms.total_loss - terms.dllm_loss).detach().double() * samples, samples),
                "nll": (nll.sum().double(), supervised.sum().double())}

    def finalize(self, means: Mapping[str, float]) -> dict[str, float]:
        values = dict(means)
        if "nll" in values:
            nll = values["nll"]
            values["ppl"] = math.exp(nll) if nll < MAX_EXPONENT else math.inf
        return values


def _through_first_eos(target_ids: Integer[Tensor, "batch seq_len"], supervised: Bool[Tensor, "batch seq_len"],
                       eos_token_id: int) -> Bool[Tensor, "batch seq_len"]:
    """The supervised tokens up to and including each row's first supervised EOS."""
    is_eos = (target_ids == eos_token_id) & supervised
    return supervised & (is_eos.long().cumsum(1) - is_eos.long() == 0)
