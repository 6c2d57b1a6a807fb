"""BD3-LM's per-block noise: one uniform level per block, optionally clipped to ``[low, high)``.

Each block of ``block_size`` columns draws ``t ~ U[low, high)``; every supervised token of the
block becomes the mask token independently with probability ``t`` and ``p_mask`` holds ``t``.
``low = eps, high = 1`` is the plain masked-diffusion bound per block; a narrower range
``[beta, omega]`` is BD3-LM's clipped schedule, which lowers the variance of the 1/t-weighted
loss at the price of training on fewer noise levels.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Bool, Float32, Integer, Shaped
from torch import Tensor


def check_level_range(low: float, high: float, where: str) -> None:
    if not 0.0 <= low <= high <= 1.0 or high == 0.0:
        raise ValueError(f"{where}: the noise level range must satisfy 0 <= low <= high <= 1 and "
                         f"high > 0, got low={low}, high={high}")


def corrupt_uniform_per_block(
    input_ids: Integer[Tensor, "batch seq_len"],
    loss_mask: Shaped[Tensor, "batch seq_len"] | None,
    mask_token_id: int,
    block_size: int,
    low: float = 1e-3,
    high: float = 1.0,
    generator: torch.Generator | None = None,
) -> tuple[Integer[Tensor, "batch seq_len"], Bool[Tensor, "batch seq_len"], Float32[Tensor, "batch seq_len"]]:
    """``(noisy_input_ids, noise_mask, p_mask)`` under one level per block; see the module docstring.

    ``loss_mask=None`` means every position is supervised; the last block may be shorter.
    """
    where = "corrupt_uniform_per_block"
    if block_size < 1:
        raise ValueError(f"{where}: block_size must be >= 1, got {block_size}")
    check_level_range(low, high, where)
    if loss_mask is not None and loss_mask.shape != input_ids.shape:
        raise ValueError(f"{where}: loss_mask shape {tuple(loss_mask.shape)} does not match "
                         f"input_ids shape {tuple(input_ids.shape)}")
    batch, seq_len = input_ids.shape
    device = input_ids.device
    levels = torch.rand((batch, math.ceil(seq_len / block_size)), generator=generator, device=device)
    levels = levels.mul_(high - low).add_(low)
    p_mask = levels[:, torch.arange(seq_len, device=device) // block_size].contiguous()
    noise_mask = torch.rand((batch, seq_len), generator=generator, device=device) < p_mask
    if loss_mask is not None:
        noise_mask &= loss_mask.bool()
    return torch.where(noise_mask, mask_token_id, input_ids), noise_mask, p_mask
