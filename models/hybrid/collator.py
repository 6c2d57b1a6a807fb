"""Hybrid training rows: MDLM's prompt/response rows with block-wise noise, on block-aligned positions.

:class:`~xdllm_models.mdlm.collator.MDLMCollator` lays the rows out (``[bos] + prompt +
response``, the response filled with supervised EOS to whole ``block_size`` blocks by
:class:`~xdllm.collate.DLLMCollator`) and corrupts the responses with
:func:`~xdllm.diffusion.corrupt_blockwise`, one level per block, from ``(seed, step,
sample_index)``. The hybrid adds the RoPE positions that start each response on a block
boundary, so that blocks counted from positions are the response's blocks. The clean rows are
what the causal branch reads, the corrupted ones what the diffusion branch denoises.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from xdllm.interfaces import Example, Tokenizer
from xdllm_models.hybrid.layout import block_aligned_positions
from xdllm_models.hybrid.types import HybridBatch
from xdllm_models.mdlm.collator import MDLMCollator


class HybridCollator:
    """Examples to a :class:`~xdllm_models.hybrid.types.HybridBatch`.

    Args:
        tokenizer: pad, mask, bos and eos ids.
        block_size: diffusion block size (response fill, noise scopes, positions).
        seed: run seed the per-sample noise derives from.
        eps: smallest masking level.
        half_life_ratio: position bias of the block-wise noise (None: no bias).
        target_length: EOS fill of each response to this many slots (None: ``target + [eos]``).
        max_length: longest allowed row; longer is an error, never a truncation.
    """

    def __init__(self, tokenizer: Tokenizer, block_size: int, seed: int = 0, eps: float = 1e-3,
                 half_life_ratio: float | None = 0.25, target_length: int | None = None,
                 max_length: int | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"HybridCollator: block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.rows = MDLMCollator(tokenizer, seed=seed, corruption="blockwise", block_size=block_size, eps=eps,
                                 half_life_ratio=half_life_ratio, target_length=target_length,
                                 max_length=max_length)

    def __call__(self, examples: Sequence[Example]) -> HybridBatch:
        batch = self.rows(examples)
        n_rows, width = batch["target_ids"].shape
        response_start = (batch["loss_mask"] != 0).int().argmax(1)  # every response has >= 1 token (eos)
        columns = torch.arange(width).expand(n_rows, width)
        return HybridBatch(**batch, positions=block_aligned_positions(columns, response_start, self.block_size))
