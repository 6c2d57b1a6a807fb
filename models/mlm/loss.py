"""MLM loss: cross-entropy on the masked positions of the canvas."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from xdllm.losses.token_nll import masked_normalised_sum, per_token_nll, prepare_logits
from xdllm_models.mlm.types import MLMLossDict


class MLMLoss:
    """Mean cross-entropy (float32) over positions where ``input_ids == mask_token_id``.

    The batch comes from an MLM collator (corruption already applied, per sample and seeded).
    Built on the dLLM losses' helpers (``xdllm.losses.token_nll``): vocab-sharded logits are
    gathered, and an empty mask gives a zero loss that still back-propagates, never NaN.
    """

    def __init__(self, mask_token_id: int) -> None:
        self.mask_token_id = mask_token_id

    def __call__(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> MLMLossDict:
        input_ids = batch["input_ids"]
        target_ids = batch["target_ids"]
        if target_ids is None or target_ids.shape != input_ids.shape:
            raise ValueError(
                f"MLMLoss: target_ids must have the shape of input_ids {tuple(input_ids.shape)}, "
                f"got {None if target_ids is None else tuple(target_ids.shape)}")
        logits = model(
            input_ids,
            attention_mask=batch.get("attention_mask"),
            positions=batch.get("positions"),
            segment_ids=batch.get("segment_ids"),
        )
        masked = input_ids == self.mask_token_id
        nll = per_token_nll(prepare_logits(logits, fp32_upcast=True), target_ids)
        num_masked = masked.sum()
        return {"loss": masked_normalised_sum(nll, masked, num_masked, None),
                "masked_tokens": num_masked.float()}
