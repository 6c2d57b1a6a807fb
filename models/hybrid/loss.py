"""Hybrid loss: ``alpha · diffusion + AR`` on one network, over the step's global token counts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from xdllm.interfaces import LossContext
from xdllm.losses import HybridDiffusionLLMLoss
from xdllm.losses.chunked import DEFAULT_CHUNK_SIZE, projects_in_chunks, supervised_token_nll
from xdllm.losses.mdlm import P_MASK_FLOOR
from xdllm.losses.output import DLLMLossOutput
from xdllm.losses.token_nll import clamped_denominator
from xdllm_models.hybrid.model import BranchLogits
from xdllm_models.hybrid.types import HybridLossDict

DIFFUSION_COUNT = "num_diffusion_tokens"
AR_COUNT = "num_ar_tokens"


class HybridLoss:
    """:class:`~xdllm.losses.HybridDiffusionLLMLoss` on both branches of one forward.

    The diffusion term is MDLM's ``Σ_{corrupted ∧ supervised} CE / t`` of the noisy half over the
    number of supervised tokens; the AR term the next-token CE of the clean half on the
    response (``loss_mask[:, 1:]``) over the number of predicted tokens. In training both
    denominators are the counts of the whole optimizer step (all processes and micro-batches,
    from :class:`~xdllm.interfaces.LossContext`); without a context (validation, ``xdllm eval``)
    the batch's own. ``alpha = 0`` trains exactly the AR objective.

    With ``chunk_size`` set (the default) and ``fp32_upcast``, the training loss takes the final
    hidden states of the ``[x_t | x_0]`` row and projects only the scored positions (corrupted
    supervised ones of the noisy half, supervised next-token predictions of the clean half) to
    the vocabulary, ``chunk_size`` at a time (:mod:`xdllm.losses.chunked`): the same values and
    gradients without ``[tokens, vocab]`` float32 logits. ``chunk_size=None`` takes the plain
    path; :meth:`objective_terms` (the evaluator's) always does.
    """

    def __init__(self, block_size: int, alpha: float = 1.0, fp32_upcast: bool = True,
                 chunk_size: int | None = DEFAULT_CHUNK_SIZE) -> None:
        if block_size < 1:
            raise ValueError(f"HybridLoss: block_size must be >= 1, got {block_size}")
        if not alpha >= 0.0:
            raise ValueError(f"HybridLoss: alpha must be >= 0, got {alpha}")
        self.block_size = block_size
        self.objective = HybridDiffusionLLMLoss(alpha=alpha, fp32_upcast=fp32_upcast)
        self.chunk_size = chunk_size if fp32_upcast else None

    def token_counts(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        supervised = batch["loss_mask"] != 0
        return {DIFFUSION_COUNT: supervised.sum(), AR_COUNT: supervised[:, 1:].sum()}

    def branch_logits(self, model: torch.nn.Module, batch: Mapping[str, Any], hidden_only: bool = False
                      ) -> BranchLogits:
        """Both branches of one forward; ``hidden_only``: their final hidden states."""
        return model.branches(batch["input_ids"], batch["target_ids"], batch["attention_mask"],
                              batch["positions"], self.block_size, hidden_only=hidden_only)

    def objective_terms(self, logits: BranchLogits, batch: Mapping[str, Any],
                        counts: Mapping[str, Tensor] | None = None) -> DLLMLossOutput:
        """The loss of already computed branch logits (``counts``: global denominators)."""
        return self.objective(logits.diffusion, batch["target_ids"], batch["noise_mask"], batch["p_mask"],
                              batch["loss_mask"], loss_mask_ar=batch["loss_mask"],
                              num_diffusion_tokens=None if counts is None else counts[DIFFUSION_COUNT],
                              num_ar_tokens=None if counts is None else counts[AR_COUNT],
                              causal_logits=logits.causal)

    def __call__(self, model: torch.nn.Module, batch: Mapping[str, Any],
                 context: LossContext | None = None) -> HybridLossDict:
        counts = context.counts if context is not None else None
        if projects_in_chunks(model, self.chunk_size):
            out = self._chunked_terms(model, batch, counts)
        else:
            out = self.objective_terms(self.branch_logits(model, batch), batch, counts)
        return HybridLossDict(loss=out.total_loss, diffusion_loss=out.dllm_loss,
                              ar_loss=(out.total_loss - out.dllm_loss).detach())

    def _chunked_terms(self, model: torch.nn.Module, batch: Mapping[str, Any],
                       counts: Mapping[str, Tensor] | None) -> DLLMLossOutput:
        """:meth:`objective_terms` of the branches' final hidden states, scored chunk by chunk."""
        hidden = self.branch_logits(model, batch, hidden_only=True)
        targets, supervised = batch["target_ids"], batch["loss_mask"] != 0
        diffusion_nll = supervised_token_nll(hidden.diffusion, model.lm_head_weight, targets,
                                             supervised & (batch["noise_mask"] != 0), self.chunk_size,
                                             scale=batch["p_mask"].clamp_min(P_MASK_FLOOR).reciprocal())
        diffusion = diffusion_nll.sum() / clamped_denominator(
            supervised.sum(), None if counts is None else counts[DIFFUSION_COUNT])
        predicted = supervised[:, 1:]
        ar_nll = supervised_token_nll(hidden.causal[:, :-1], model.lm_head_weight, targets[:, 1:], predicted,
                                      self.chunk_size)
        ar = ar_nll.sum() / clamped_denominator(predicted.sum(), None if counts is None else counts[AR_COUNT])
        scaled_diffusion = self.objective.alpha * diffusion
        return DLLMLossOutput(scaled_diffusion + ar, scaled_diffusion.detach())
