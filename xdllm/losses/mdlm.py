"""MDLM cross-entropy: the masked-diffusion ELBO with the linear-schedule weight 1 / p."""

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

P_MASK_FLOOR = 1e-8
"""``p_mask`` is clamped to this before dividing, so a zero level cannot give inf."""


def masked_diffusion_term(
    token_nll: Float[Tensor, "batch seq_len"],
    noise_mask: Shaped[Tensor, "batch seq_len"],
    p_mask: Float[Tensor, "batch seq_len"],
    loss_mask: Shaped[Tensor, "batch seq_len"],
    num_diffusion_tokens: Optional[Count],
) -> Float[Tensor, ""]:
    """``Σ_{noise_mask ∧ loss_mask} nll / clamp(p, 1e-8)`` over ``num_diffusion_tokens``.

    The local denominator is the number of supervised positions (``Σ loss_mask``), not the
    number of corrupted ones: that is the unbiased MDLM ELBO estimate per supervised token.
    """
    supervised = loss_mask != 0
    selected = (noise_mask != 0) & supervised
    weighted_nll = token_nll / p_mask.clamp_min(P_MASK_FLOOR).to(token_nll.dtype)
    return masked_normalised_sum(weighted_nll, selected, supervised.sum(), num_diffusion_tokens)


class MDLMCrossEntropyLoss(nn.Module):
    """Masked-diffusion (MDLM) loss: 1/p-weighted CE on corrupted supervised positions.

    ``fp32_upcast=True`` computes the cross-entropy in float32 whatever the logits dtype;
    ``False`` keeps the logits dtype. The AR arguments exist so every dLLM loss shares one
    signature; they are ignored here.
    """

    def __init__(self, fp32_upcast: bool = True) -> None:
        super().__init__()
        self.fp32_upcast = fp32_upcast

    def forward(
        self,
        logits: Float[Tensor, "batch seq_len vocab"],
        target_ids: Integer[Tensor, "batch seq_len"],
        noise_mask: Shaped[Tensor, "batch seq_len"],
        p_mask: Float[Tensor, "batch seq_len"],
        loss_mask: Shaped[Tensor, "batch seq_len"],
        loss_mask_ar: Optional[Shaped[Tensor, "batch seq_len"]] = None,
        num_diffusion_tokens: Optional[Count] = None,
        num_ar_tokens: Optional[Count] = None,
        causal_logits: Optional[Float[Tensor, "batch seq_len vocab"]] = None,
    ) -> DLLMLossOutput:
        """``total_loss`` = the MDLM term; ``dllm_loss`` is the same value, detached."""
        token_nll = per_token_nll(prepare_logits(logits, self.fp32_upcast), target_ids)
        loss = masked_diffusion_term(token_nll, noise_mask, p_mask, loss_mask,
                                     num_diffusion_tokens)
        return DLLMLossOutput(loss, loss.detach())
