"""UDLM loss: flat cross-entropy over the whole supervised canvas plus the encoder's next-token term.

Under uniform random-token noise a token that looks clean may be noise, so the denoiser learns
every supervised canvas position, corrupted or not, with no ``1/t`` weight
(:class:`~xdllm.losses.BlockDiffusionCrossEntropyLoss`). The encoder learns the next token of
the clean row (prompt and response, :func:`~xdllm.losses.encoder_ar_loss`). The total is
``diffusion + encoder_weight · encoder``. In training each term divides by its count over the
whole optimizer step (all processes and micro-batches, from
:class:`~xdllm.interfaces.LossContext`); without a context (validation, ``xdllm eval``) by the
batch's own counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from xdllm.interfaces import LossContext
from xdllm.losses import BlockDiffusionCrossEntropyLoss, encoder_ar_loss
from xdllm_models.udlm.model import CanvasEncoderLogits
from xdllm_models.udlm.types import UDLMLossDict

CANVAS_COUNT = "num_canvas_tokens"
ENCODER_COUNT = "num_encoder_pairs"


class UDLMLoss:
    """The training objective; see the module docstring.

    Args:
        block_size: canvas block size (the mask rule's; the collator's must match).
        encoder_weight: weight of the encoder's next-token term (0: the encoder is not trained
            as a language model, only as the denoiser's context).
        fp32_upcast: compute the cross-entropy in float32.
    """

    def __init__(self, block_size: int, encoder_weight: float = 1.0, fp32_upcast: bool = True) -> None:
        if block_size < 1:
            raise ValueError(f"UDLMLoss: block_size must be >= 1, got {block_size}")
        if not encoder_weight >= 0.0:
            raise ValueError(f"UDLMLoss: encoder_weight must be >= 0, got {encoder_weight}")
        self.block_size = block_size
        self.encoder_weight = encoder_weight
        self.canvas_loss = BlockDiffusionCrossEntropyLoss(fp32_upcast)

    def token_counts(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        real = batch["attention_mask"].bool()
        return {CANVAS_COUNT: (batch["canvas_loss_mask"] != 0).sum(), ENCODER_COUNT: (real[:, :-1] & real[:, 1:]).sum()}

    def logits(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> CanvasEncoderLogits:
        return model.canvas_and_encoder(batch["canvas_input_ids"], batch["canvas_positions"], batch["input_ids"],
                                        batch["attention_mask"], batch["positions"], self.block_size)

    def __call__(self, model: torch.nn.Module, batch: Mapping[str, Any],
                 context: LossContext | None = None) -> UDLMLossDict:
        logits = self.logits(model, batch)
        counts = context.counts if context is not None else None
        diffusion = self.canvas_loss(logits.canvas, batch["canvas_target_ids"], batch["canvas_noise_mask"],
                                     batch["canvas_p_mask"], batch["canvas_loss_mask"],
                                     num_diffusion_tokens=None if counts is None else counts[CANVAS_COUNT]).total_loss
        encoder = encoder_ar_loss(logits.encoder, batch["input_ids"], batch["attention_mask"],
                                  num_tokens=None if counts is None else counts[ENCODER_COUNT])
        return UDLMLossDict(loss=diffusion + self.encoder_weight * encoder, diffusion_loss=diffusion.detach(),
                            encoder_loss=encoder.detach())
