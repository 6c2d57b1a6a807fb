"""MLM loss: cross-entropy on the masked positions of the canvas."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from xdllm.collate.attention_annealing import annealed_mask_rule
from xdllm.interfaces import LossContext
from xdllm.losses.chunked import DEFAULT_CHUNK_SIZE, projects_in_chunks, supervised_token_nll
from xdllm.losses.token_nll import clamped_denominator, masked_normalised_sum, per_token_nll, prepare_logits
from xdllm_models.mlm.types import MLMLossDict

COUNT_KEY = "masked_tokens"


class MLMLoss:
    """Mean cross-entropy (float32) over positions where ``input_ids == mask_token_id``.

    In training the denominator is the masked-token count of the whole optimizer step (all
    processes, all accumulation micro-batches: a :class:`~xdllm.interfaces.GlobalCountLoss`),
    so the gradient does not depend on how the global batch is split; without a context
    (validation, ``xdllm eval``) the batch's own count.

    The batch comes from an MLM collator (corruption already applied, per sample and seeded).
    Built on the dLLM losses' helpers (``xdllm.losses.token_nll``): vocab-sharded logits are
    gathered, and an empty mask gives a zero loss that still back-propagates, never NaN.

    A model with ``final_hidden`` and ``lm_head_weight`` (:class:`RotaryTransformerMLMModel`)
    is scored on its masked positions only, ``chunk_size`` at a time, without float32 logits
    of every position (:mod:`xdllm.losses.chunked`; same value and gradients).
    ``chunk_size=None`` takes the plain path. While a training batch anneals attention (its
    collator's ``attention_annealing_steps``) the model runs under the batch's annealed rule.
    """

    def __init__(self, mask_token_id: int, chunk_size: int | None = DEFAULT_CHUNK_SIZE) -> None:
        self.mask_token_id = mask_token_id
        self.chunk_size = chunk_size

    def token_counts(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        return {COUNT_KEY: (batch["input_ids"] == self.mask_token_id).sum()}

    def __call__(self, model: torch.nn.Module, batch: Mapping[str, Any],
                 context: LossContext | None = None) -> MLMLossDict:
        input_ids = batch["input_ids"]
        target_ids = batch["target_ids"]
        if target_ids is None or target_ids.shape != input_ids.shape:
            raise ValueError(
                f"MLMLoss: target_ids must have the shape of input_ids {tuple(input_ids.shape)}, "
                f"got {None if target_ids is None else tuple(target_ids.shape)}")
        inputs = dict(attention_mask=batch.get("attention_mask"), positions=batch.get("positions"),
                      segment_ids=batch.get("segment_ids"), **annealed_mask_rule(batch))
        masked = input_ids == self.mask_token_id
        num_masked = masked.sum()
        global_count = None if context is None or context.counts is None else context.counts[COUNT_KEY]
        if projects_in_chunks(model, self.chunk_size):
            nll = supervised_token_nll(model.final_hidden(input_ids, **inputs), model.lm_head_weight, target_ids,
                                       masked, self.chunk_size)
            loss = nll.sum() / clamped_denominator(num_masked, global_count)
        else:
            nll = per_token_nll(prepare_logits(model(input_ids, **inputs), fp32_upcast=True), target_ids)
            loss = masked_normalised_sum(nll, masked, num_masked, global_count)
        return {"loss": loss, "masked_tokens": num_masked.float()}
