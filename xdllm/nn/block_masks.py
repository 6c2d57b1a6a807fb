"""FlexAttention's block-sparse mask from the dense boolean mask, without ``create_block_mask``.

``create_block_mask`` (uncompiled) evaluates the ``mask_mod`` at every (query, key) pair under
``vmap``: for the packed rows of ``bench_gpu_training.py`` (8 x 2048 tokens) 64 ms on the 2-core
CPU for a document mask, every training step, since packed documents change with the batch. A
rule's :meth:`~xdllm.nn.masks.MaskRule.dense` gives the same booleans by broadcasting; reduced
block by block (a block with any pair allowed is kept, one with every pair allowed is full) they
give the same ``BlockMask`` (tested equal to ``create_block_mask``'s for every rule) in 25 ms
there (``python scripts/bench_block_mask.py``, median of 5). The ``mask_mod`` still decides inside the
partial blocks, as before.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask

BLOCK = 128
"""The block size of the masks built here: FlexAttention's default, and ``create_block_mask``'s."""


def fits_blocks(q_len: int, kv_len: int) -> bool:
    """Whether both lengths are whole blocks, as :func:`block_mask_from_dense` needs."""
    return q_len % BLOCK == 0 and kv_len % BLOCK == 0


def block_mask_from_dense(dense: Bool[Tensor, "batch 1 q_len kv_len"], mask_mod) -> BlockMask:
    """The ``BlockMask`` of ``dense`` (lengths whole blocks of :data:`BLOCK`): a block pair is
    full when every pair in it is allowed, partial (``mask_mod`` decides inside) when some are;
    each query block's kept key blocks in ascending order, as ``create_block_mask`` lists them."""
    batch, heads, q_len, kv_len = dense.shape
    if not fits_blocks(q_len, kv_len):
        raise ValueError(f"block_mask_from_dense: lengths {q_len} x {kv_len} are not whole blocks of {BLOCK}")
    blocks = dense.reshape(batch, heads, q_len // BLOCK, BLOCK, kv_len // BLOCK, BLOCK)
    some = blocks.any(dim=5).any(dim=3)
    every = blocks.all(dim=5).all(dim=3)
    partial_count, partial_order = _listed(some & ~every)
    full_count, full_order = _listed(every)
    return BlockMask.from_kv_blocks(partial_count, partial_order, full_count, full_order, BLOCK_SIZE=BLOCK,
                                    mask_mod=mask_mod)


def _listed(kept: Tensor) -> tuple[Tensor, Tensor]:
    """How many key blocks each query block keeps, and their indices first, ascending (int32)."""
    count = kept.sum(dim=-1, dtype=torch.int32)
    order = torch.argsort((~kept).to(torch.uint8), dim=-1, stable=True).to(torch.int32)
    return count, order
