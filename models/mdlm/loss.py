"""MDLM loss: the 1/t-weighted masked-diffusion bound, over the global count of supervised tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from xdllm.collate.attention_annealing import annealed_mask_rule
from xdllm.interfaces import LossContext
from xdllm.losses import MDLMCrossEntropyLoss
from xdllm.losses.chunked import DEFAULT_CHUNK_SIZE, projects_in_chunks, supervised_token_nll
from xdllm.losses.mdlm import P_MASK_FLOOR
from xdllm.losses.token_nll import Count, clamped_denominator
from xdllm_models.mdlm.types import MDLMLossDict

COUNT_KEY = "num_diffusion_tokens"


class MDLMLoss:
    """``Σ_{corrupted ∧ supervised} CE / t`` over the number of supervised tokens.

    In training the denominator is the supervised-token count of the whole optimizer step (all
    processes, all accumulation micro-batches), handed over by the harness through
    :class:`~xdllm.interfaces.LossContext`, so the gradient does not depend on how the global
    batch is split. Without a context (validation, ``xdllm eval``) the batch's own count is used.
    The cross-entropy is computed in float32 (``fp32_upcast``).

    With ``chunk_size`` set (the default) and ``fp32_upcast``, only the corrupted supervised
    positions are projected to the vocabulary, ``chunk_size`` at a time
    (:mod:`xdllm.losses.chunked`): the same value and gradients without ``[tokens, vocab]``
    float32 logits. ``chunk_size=None`` takes the plain path.
    """

    def __init__(self, fp32_upcast: bool = True, chunk_size: int | None = DEFAULT_CHUNK_SIZE) -> None:
        self.cross_entropy = MDLMCrossEntropyLoss(fp32_upcast=fp32_upcast)
        self.chunk_size = chunk_size if fp32_upcast else None

    def token_counts(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        return {COUNT_KEY: (batch["loss_mask"] != 0).sum()}

    def __call__(self, model: torch.nn.Module, batch: Mapping[str, Any],
                 context: LossContext | None = None) -> MDLMLossDict:
        counts = context.counts if context is not None else None
        global_count = None if counts is None else counts[COUNT_KEY]
        if projects_in_chunks(model, self.chunk_size):
            loss = self._chunked_loss(model, batch, global_count)
        else:
            logits = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                           positions=batch.get("positions"), **annealed_mask_rule(batch))
            loss = self.cross_entropy(logits, batch["target_ids"], batch["noise_mask"], batch["p_mask"],
                                      batch["loss_mask"], num_diffusion_tokens=global_count).total_loss
        return MDLMLossDict(loss=loss, masked_tokens=batch["noise_mask"].sum().float())

    def _chunked_loss(self, model: torch.nn.Module, batch: Mapping[str, Any], global_count: Count | None) -> Tensor:
        supervised = batch["loss_mask"] != 0
        hidden = model.final_hidden(batch["input_ids"], attention_mask=batch["attention_mask"],
                                    positions=batch.get("positions"), **annealed_mask_rule(batch))
        weighted_nll = supervised_token_nll(hidden, model.lm_head_weight, batch["target_ids"],
                                            (batch["noise_mask"] != 0) & supervised, self.chunk_size,
                                            scale=batch["p_mask"].clamp_min(P_MASK_FLOOR).reciprocal())
        denominator = clamped_denominator(supervised.sum(), global_count)
        return weighted_nll.sum() / denominator
