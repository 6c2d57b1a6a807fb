"""UDLM loss: flat cross-entropy over the whole supervised canvas plus the encoder's next-token term.

Under uniform random-token noise a token that looks clean may be noise, so the denoiser learns
every supervised canvas position, corrupted or not, with no ``1/t`` weight
(:class:`~xdllm.losses.BlockDiffusionCrossEntropyLoss`). The encoder learns the next token of
the clean row (prompt and response, :func:`~xdllm.losses.encoder_ar_loss`). The total is
``diffusion + encoder_weight · encoder``; its output's ``diffusion_loss`` and ``encoder_loss``
(``encoder_weight · encoder``) are those two shares, so they add up to ``loss`` as every global-count
loss's terms do. In training each term divides by its count over the
whole optimizer step (all processes and micro-batches, from
:class:`~xdllm.interfaces.LossContext`); without a context (validation, ``xdllm eval``) by the
batch's own counts.

With ``chunk_size`` set (the default) and ``fp32_upcast``, the training loss takes the final
hidden states of the ``[canvas | encoder row]`` forward and projects only the scored positions
(supervised canvas positions, valid next-token pairs of the encoder row) to the vocabulary,
``chunk_size`` at a time (:mod:`xdllm.losses.chunked`): the same values and gradients without
``[tokens, vocab]`` float32 logits. ``chunk_size=None`` takes the plain path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from xdllm.interfaces import LossContext
from xdllm.losses import BlockDiffusionCrossEntropyLoss, encoder_ar_loss
from xdllm.losses.chunked import DEFAULT_CHUNK_SIZE, projects_in_chunks, supervised_token_nll
from xdllm.losses.token_nll import Count, clamped_denominator
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
        fp32_upcast: compute the canvas cross-entropy in float32 (the encoder's always is).
        chunk_size: score this many positions at a time on the chunked path (None: the plain path).
    """

    def __init__(self, block_size: int, encoder_weight: float = 1.0, fp32_upcast: bool = True,
                 chunk_size: int | None = DEFAULT_CHUNK_SIZE) -> None:
        if block_size < 1:
            raise ValueError(f"UDLMLoss: block_size must be >= 1, got {block_size}")
        if not encoder_weight >= 0.0:
            raise ValueError(f"UDLMLoss: encoder_weight must be >= 0, got {encoder_weight}")
        self.block_size = block_size
        self.encoder_weight = encoder_weight
        self.canvas_loss = BlockDiffusionCrossEntropyLoss(fp32_upcast)
        self.chunk_size = chunk_size if fp32_upcast else None

    def token_counts(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        return {CANVAS_COUNT: (batch["canvas_loss_mask"] != 0).sum(), ENCODER_COUNT: _encoder_pairs(batch).sum()}

    def logits(self, model: torch.nn.Module, batch: Mapping[str, Any], hidden_only: bool = False
               ) -> CanvasEncoderLogits:
        """The forward over ``[canvas | encoder row]``; ``hidden_only``: the final hidden states."""
        return model.canvas_and_encoder(batch["canvas_input_ids"], batch["canvas_positions"], batch["input_ids"],
                                        batch["attention_mask"], batch["positions"], self.block_size,
                                        hidden_only=hidden_only)

    def __call__(self, model: torch.nn.Module, batch: Mapping[str, Any],
                 context: LossContext | None = None) -> UDLMLossDict:
        counts = context.counts if context is not None else None
        canvas_count = None if counts is None else counts[CANVAS_COUNT]
        encoder_count = None if counts is None else counts[ENCODER_COUNT]
        if projects_in_chunks(model, self.chunk_size):
            diffusion, encoder = self._chunked_terms(model, batch, canvas_count, encoder_count)
        else:
            diffusion, encoder = self._plain_terms(model, batch, canvas_count, encoder_count)
        weighted_encoder = self.encoder_weight * encoder
        return UDLMLossDict(loss=diffusion + weighted_encoder, diffusion_loss=diffusion.detach(),
                            encoder_loss=weighted_encoder.detach())

    def _plain_terms(self, model: torch.nn.Module, batch: Mapping[str, Any], canvas_count: Count | None,
                     encoder_count: Count | None) -> tuple[Tensor, Tensor]:
        logits = self.logits(model, batch)
        diffusion = self.canvas_loss(logits.canvas, batch["canvas_target_ids"], batch["canvas_noise_mask"],
                                     batch["canvas_p_mask"], batch["canvas_loss_mask"],
                                     num_diffusion_tokens=canvas_count).total_loss
        encoder = encoder_ar_loss(logits.encoder, batch["input_ids"], batch["attention_mask"], num_tokens=encoder_count)
        return diffusion, encoder

    def _chunked_terms(self, model: torch.nn.Module, batch: Mapping[str, Any], canvas_count: Count | None,
                       encoder_count: Count | None) -> tuple[Tensor, Tensor]:
        """:meth:`_plain_terms` from the final hidden states, scored chunk by chunk."""
        hidden = self.logits(model, batch, hidden_only=True)
        supervised = batch["canvas_loss_mask"] != 0
        canvas_nll = supervised_token_nll(hidden.canvas, model.lm_head_weight, batch["canvas_target_ids"], supervised,
                                          self.chunk_size)
        pairs = _encoder_pairs(batch)
        encoder_nll = supervised_token_nll(hidden.encoder[:, :-1], model.lm_head_weight, batch["input_ids"][:, 1:],
                                           pairs, self.chunk_size)
        return (canvas_nll.sum() / clamped_denominator(supervised.sum(), canvas_count),
                encoder_nll.sum() / clamped_denominator(pairs.sum(), encoder_count))


def _encoder_pairs(batch: Mapping[str, Any]) -> Tensor:
    """Where both token ``i`` and ``i + 1`` of the encoder row are real (the encoder's predictions)."""
    real = batch["attention_mask"].bool()
    return real[:, :-1] & real[:, 1:]
