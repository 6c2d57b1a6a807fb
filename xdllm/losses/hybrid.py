"""Hybrid diffusion + autoregressive loss (a diffusion branch and a causal branch)."""

from __future__ import annotations

from typing import Optional

from jaxtyping import Float, Integer, Shaped
from torch import Tensor, nn

from xdllm.losses.mdlm import masked_diffusion_term
from xdllm.losses.output import DLLMLossOutput
from xdllm.losses.token_nll import (
    Count,
    gather_vocab_shards,
    masked_normalised_sum,
    next_token_nll,
    per_token_nll,
    prepare_logits,
)


def split_branches(
    logits: Float[Tensor, "batch logits_len vocab"],
    seq_len: int,
    causal_logits: Optional[Float[Tensor, "batch seq_len vocab"]],
) -> tuple[Tensor, Optional[Tensor]]:
    """``(diffusion_logits, causal_logits)`` from either layout.

    Separate tensors: ``logits`` is ``[B, L, V]`` and ``causal_logits`` is passed. Legacy layout:
    ``causal_logits`` is None and ``logits`` is ``[B, 2L, V]``, diffusion half first.
    """
    logits_len = logits.shape[1]
    if logits_len == seq_len:
        return logits, causal_logits
    if logits_len == 2 * seq_len and causal_logits is None:
        return logits[:, :seq_len], logits[:, seq_len:]
    expected = "L" if causal_logits is not None else "L (or 2L for the legacy layout)"
    raise ValueError(
        f"HybridDiffusionLLMLoss: logits have {logits_len} positions but target_ids has "
        f"L={seq_len}; expected {expected}")


class HybridDiffusionLLMLoss(nn.Module):
    """``total = alpha · MDLM diffusion term + AR term``.

    The AR term (only when ``loss_mask_ar`` is given) is the next-token CE of the causal
    branch, ``causal_logits[:, :-1]`` against ``target_ids[:, 1:]`` on ``loss_mask_ar[:, 1:]``,
    over ``num_ar_tokens`` or the local ``Σ loss_mask_ar[:, 1:]``. ``dllm_loss`` is
    ``alpha · diffusion``, detached.
    """

    def __init__(self, alpha: float = 1.0, fp32_upcast: bool = True) -> None:
        super().__init__()
        self.alpha = float(alpha)
        self.fp32_upcast = fp32_upcast

    def forward(
        self,
        logits: Float[Tensor, "batch logits_len vocab"],
        target_ids: Integer[Tensor, "batch seq_len"],
        noise_mask: Shaped[Tensor, "batch seq_len"],
        p_mask: Float[Tensor, "batch seq_len"],
        loss_mask: Shaped[Tensor, "batch seq_len"],
        loss_mask_ar: Optional[Shaped[Tensor, "batch seq_len"]] = None,
        num_diffusion_tokens: Optional[Count] = None,
        num_ar_tokens: Optional[Count] = None,
        causal_logits: Optional[Float[Tensor, "batch seq_len vocab"]] = None,
    ) -> DLLMLossOutput:
        """``logits`` is the diffusion branch ``[B, L, V]``, or ``[B, 2L, V]`` holding both
        branches (legacy) when ``causal_logits`` is None."""
        diffusion_logits, causal_logits = split_branches(
            gather_vocab_shards(logits), target_ids.shape[1], causal_logits)
        token_nll = per_token_nll(prepare_logits(diffusion_logits, self.fp32_upcast), target_ids)
        scaled_diffusion = self.alpha * masked_diffusion_term(
            token_nll, noise_mask, p_mask, loss_mask, num_diffusion_tokens)
        total = scaled_diffusion
        if loss_mask_ar is not None:
            if causal_logits is None:
                raise ValueError(
                    "HybridDiffusionLLMLoss: loss_mask_ar was given but there is no causal "
                    "branch; pass causal_logits [B, L, V] or logits [B, 2L, V] (legacy layout)")
            total = total + self._ar_term(causal_logits, target_ids, loss_mask_ar, num_ar_tokens)
        return DLLMLossOutput(total, scaled_diffusion.detach())

    def _ar_term(self, causal_logits: Tensor, target_ids: Tensor, loss_mask_ar: Tensor,
                 num_ar_tokens: Optional[Count]) -> Tensor:
        """Next-token CE of the causal branch on ``loss_mask_ar[:, 1:]``."""
        token_nll = next_token_nll(prepare_logits(causal_logits, self.fp32_upcast), target_ids)
        supervised = loss_mask_ar[:, 1:] != 0
        return masked_normalised_sum(token_nll, supervised, supervised.sum(), num_ar_tokens)
