"""Semi-autoregressive block decoding: which part of the output region may be unmasked now.

With ``block_size = bs`` a row's output region (offsets ``0 .. region_len - 1``) is cut into
``n = ceil(region_len / bs)`` blocks ``[j bs, (j+1) bs)``; the last may be shorter. The current
block is the one holding the row's first remaining mask, so blocks are decoded left to right and
a block without masks is skipped. Without ``block_size`` the whole region is one block.

Steps are split over blocks statically: block ``j`` must be finished by its deadline
``D_j = (j+1) q + min(j+1, r)`` with ``q, r = divmod(max_steps, n)``, i.e. every block gets
``q`` steps and the first ``r`` blocks one more. A block that finishes early hands its unused
steps to the next one (the next block starts before its nominal first step but keeps its
deadline). ``max_steps`` must be at least ``n`` so that no block gets zero steps.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Integer
from torch import Tensor


def whole_blocks(length: int, block_size: int) -> int:
    """``length`` rounded up to a multiple of ``block_size``: the positions that many tokens
    take when they start on a block boundary and fill whole blocks."""
    return -(-length // block_size) * block_size


def count_blocks(region_len: Integer[Tensor, " batch"],
                 block_size: int | None) -> Integer[Tensor, " batch"]:
    """Number of blocks per row (at least 1, so deadlines stay defined for empty regions)."""
    if block_size is None:
        return torch.ones_like(region_len)
    return ((region_len + block_size - 1) // block_size).clamp(min=1)


def check_step_budget(n_blocks: Integer[Tensor, " batch"], max_steps: int) -> None:
    """Every block needs at least one step."""
    most = int(n_blocks.max()) if n_blocks.numel() else 0
    if most > max_steps:
        raise ValueError(f"max_steps={max_steps} is smaller than the number of blocks ({most}); "
                         "raise max_steps or block_size")


def current_block(masked: Bool[Tensor, "batch region"], block_size: int | None
                  ) -> tuple[Integer[Tensor, " batch"], Bool[Tensor, "batch region"]]:
    """Index of the block holding each row's first mask, and which offsets belong to it."""
    width = masked.shape[1]
    offsets = torch.arange(width, device=masked.device)
    if block_size is None:
        return (torch.zeros(masked.shape[0], dtype=torch.long, device=masked.device),
                torch.ones_like(masked))
    first_mask = torch.where(masked, offsets, width).min(1).values
    block = first_mask // block_size
    return block, (offsets // block_size)[None, :] == block[:, None]


def block_deadline(block: Integer[Tensor, " batch"], n_blocks: Integer[Tensor, " batch"],
                   max_steps: int) -> Integer[Tensor, " batch"]:
    """Number of steps after which block ``block`` must have no masks left."""
    per_block = max_steps // n_blocks
    extra = max_steps % n_blocks
    done = block + 1
    return done * per_block + torch.minimum(done, extra)
