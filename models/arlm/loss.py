"""ARLM loss: next-token cross-entropy on the supervised tokens, over their global count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from xdllm.interfaces import LossContext
from xdllm.losses.chunked import DEFAULT_CHUNK_SIZE, projects_in_chunks, supervised_token_nll
from xdllm.losses.token_nll import Count, clamped_denominator, masked_normalised_sum, next_token_nll, prepare_logits
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

    With ``chunk_size`` set (the default) and ``fp32_upcast``, the training loss projects only
    the supervised predictions to the vocabulary, ``chunk_size`` at a time
    (:mod:`xdllm.losses.chunked`): the same value and gradients without ``[tokens, vocab]``
    float32 logits. ``chunk_size=None`` takes the plain path. :meth:`token_nll` (per-position
    values for the metrics) always takes the plain path.
    """

    def __init__(self, fp32_upcast: bool = True, chunk_size: int | None = DEFAULT_CHUNK_SIZE) -> None:
        self.fp32_upcast = fp32_upcast
        self.chunk_size = chunk_size if fp32_upcast else None

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
        counts = context.counts if context is not None else None
        global_count = None if counts is None else counts[COUNT_KEY]
        if projects_in_chunks(model, self.chunk_size):
            loss, supervised = self._chunked_loss(model, batch, global_count)
        else:
            nll, supervised = self.token_nll(model, batch)
            loss = masked_normalised_sum(nll, supervised, supervised.sum(), global_count)
        return ARLMLossDict(loss=loss, supervised_tokens=supervised.sum().float())

    def _chunked_loss(self, model: torch.nn.Module, batch: Mapping[str, Any], global_count: Count | None
                      ) -> tuple[Tensor, Tensor]:
        supervised = batch["loss_mask"][:, 1:].bool()
        hidden = model.final_hidden(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                                    positions=batch.get("positions"), segment_ids=batch.get("segment_ids"))
        nll = supervised_token_nll(hidden[:, :-1], model.lm_head_weight, batch["input_ids"][:, 1:], supervised,
                                   self.chunk_size)
        return nll.sum() / clamped_denominator(supervised.sum(), global_count), supervised
