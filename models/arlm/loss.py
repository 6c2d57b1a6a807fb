"""ARLM loss: next-token cross-entropy on the supervised tokens, over their global count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from xdllm.interfaces import LossContext
from xdllm.losses.token_nll import masked_normalised_sum, next_token_nll, prepare_logits
from xdllm_models.arlm.types import ARLMLossDict

COUNT_KEY = "num_ar_tokens"


class ARLMLoss:
    """``Σ_{supervised i} -log p(x_i | x_<i)`` over the number of supervised tokens.

    The logits at column ``i`` predict the token at ``i + 1``; ``loss_mask[:, 1:]`` says which
    predictions count (the response; never a document's first token). In training the
    denominator is the supervised-token count of the whole optimizer step (all processes and
    accumulation micro-batches, from :class:`~xdllm.interfaces.LossContext`); without a context
    (validation, ``xdllm eval``) the batch's own count. The cross-entropy is computed in float32
    (``fp32_upcast``).
    """

    def __init__(self, fp32_upcast: bool = True) -> None:
        self.fp32_upcast = fp32_upcast

    def token_counts(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        return {COUNT_KEY: batch["loss_mask"][:, 1:].sum()}

    def token_nll(self, model: torch.nn.Module, batch: Mapping[str, Any]
                  ) -> tuple[Float[Tensor, "batch predictions"], Bool[Tensor, "batch predictions"]]:
        """Per-prediction NLL (column ``i`` predicting token ``i + 1``) and which ones count."""
        logits = model(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                       positions=batch.get("positions"), segment_ids=batch.get("segment_ids"))
        nll = next_token_nll(prepare_logits(logits, self.fp32_upcast), batch["input_ids"])
        return nll, batch["loss_mask"][:, 1:].bool()

    def __call__(self, model: torch.nn.Module, batch: Mapping[str, Any],
                 context: LossContext | None = None) -> ARLMLossDict:
        nll, supervised = self.token_nll(model, batch)
        counts = context.counts if context is not None else None
        loss = masked_normalised_sum(nll, supervised, supervised.sum(),
                                     None if counts is None else counts[COUNT_KEY])
        return ARLMLossDict(loss=loss, supervised_tokens=supervised.sum().float())
