"""Flat cross-entropy for block diffusion trained with uniform (D3PM) corruption."""

from __future__ import annotations

from typing import Optional

from jaxtyping import Float, Integer, Shaped
from torch import Tensor, nn

from xdllm.losses.output import DLLMLossOutput
from xdllm.losses.token_nll import (
    Count,
    masked_normalised_sum,
    per_token_nll,
    prepare_logits,
)


class BlockDiffusionCrossEntropyLoss(nn.Module):
    """Mean CE over every supervised canvas position, corrupted or not.

    Under uniform-replacement corruption a clean-looking token may still be noise, so the loss
    support is the whole supervised canvas and there is no 1/t weight. ``noise_mask``,
    ``p_mask`` and the AR arguments are accepted (one signature for all dLLM losses) and
    ignored.
    """

    def __init__(self, fp32_upcast: bool = True) -> None:
        super().__init__()
        self.fp32_upcast = fp32_upcast

    def forward(
        self,
        logits: Float[Tensor, "batch seq_len vocab"],
        target_ids: Integer[Tensor, "batch seq_len"],
        noise_mask: Shaped[Tensor, "batch seq_len"],
        p_mask: Shaped[Tensor, "batch seq_len"],
        loss_mask: Shaped[Tensor, "batch seq_len"],
        loss_mask_ar: Optional[Shaped[Tensor, "batch seq_len"]] = None,
        num_diffusion_tokens: Optional[Count] = None,
        num_ar_tokens: Optional[Count] = None,
        causal_logits: Optional[Float[Tensor, "batch seq_len vocab"]] = None,
    ) -> DLLMLossOutput:
        """``Σ_{loss_mask} CE / N``; N = ``num_diffusion_tokens`` or ``Σ loss_mask``."""
        token_nll = per_token_nll(prepare_logits(logits, self.fp32_upcast), target_ids)
        supervised = loss_mask != 0
        loss = masked_normalised_sum(token_nll, supervised, supervised.sum(),
                                     num_diffusion_tokens)
        return DLLMLossOutput(loss, loss.detach())
