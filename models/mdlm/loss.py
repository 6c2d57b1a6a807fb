"""MDLM loss: the 1/t-weighted masked-diffusion bound, over the global count of supervised tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from xdllm.interfaces import LossContext
from xdllm.losses import MDLMCrossEntropyLoss
from xdllm_models.mdlm.types import MDLMLossDict

COUNT_KEY = "num_diffusion_tokens"


class MDLMLoss:
    """``Σ_{corrupted ∧ supervised} CE / t`` over the number of supervised tokens.

    In training the denominator is the supervised-token count of the whole optimizer step (all
    processes, all accumulation micro-batches), handed over by the harness through
    :class:`~xdllm.interfaces.LossContext`, so the gradient does not depend on how the global
    batch is split. Without a context (validation, ``xdllm eval``) the batch's own count is used.
    The cross-entropy is computed in float32 (``fp32_upcast``).
    """

    def __init__(self, fp32_upcast: bool = True) -> None:
        self.cross_entropy = MDLMCrossEntropyLoss(fp32_upcast=fp32_upcast)

    def token_counts(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        return {COUNT_KEY: (batch["loss_mask"] != 0).sum()}

    def __call__(self, model: torch.nn.Module, batch: Mapping[str, Any],
                 context: LossContext | None = None) -> MDLMLossDict:
        logits = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                       positions=batch.get("positions"))
        counts = context.counts if context is not None else None
        out = self.cross_entropy(logits, batch["target_ids"], batch["noise_mask"], batch["p_mask"],
                                 batch["loss_mask"],
                                 num_diffusion_tokens=None if counts is None else counts[COUNT_KEY])
        return MDLMLossDict(loss=out.total_loss, masked_tokens=batch["noise_mask"].sum().float())
