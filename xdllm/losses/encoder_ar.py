"""Next-token cross-entropy on an encoder's causal logits (co-trained AR objective)."""

from __future__ import annotations

from typing import Optional

import torch
from jaxtyping import Float, Integer, Shaped
from torch import Tensor

from xdllm.losses.token_nll import Count, masked_normalised_sum, next_token_nll, prepare_logits


def encoder_ar_loss(
    encoder_logits: Float[Tensor, "batch seq_len vocab"],
    input_ids: Integer[Tensor, "batch seq_len"],
    valid_mask: Optional[Shaped[Tensor, "batch seq_len"]] = None,
    num_tokens: Optional[Count] = None,
) -> Float[Tensor, ""]:
    """Mean float32 CE of token ``i + 1`` given the logits at ``i``, over pairs where both
    ``i`` and ``i + 1`` are valid.

    The denominator is ``num_tokens`` (a global count) or the local number of such pairs,
    clamped to >= 1. ``valid_mask=None`` means every position is valid.
    """
    token_nll = next_token_nll(prepare_logits(encoder_logits, fp32_upcast=True), input_ids)
    if valid_mask is None:
        pairs = token_nll.new_ones(token_nll.shape, dtype=torch.bool)
    else:
        valid = valid_mask != 0
        pairs = valid[:, :-1] & valid[:, 1:]
    return masked_normalised_sum(token_nll, pairs, pairs.sum(), num_tokens)
