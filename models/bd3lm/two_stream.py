"""The block-diffusion training forward: one pass over ``[x_t | x_0]`` trains every block.

The network sees each row twice, the noisy copy then the clean one, with the same positions
(and document ids) in both halves, under :class:`~xdllm.nn.BlockDiffusionMask`: a noisy block
attends to itself and to the clean blocks before it, a clean block to the clean blocks up to
itself. So the logits of noisy block ``b`` are exactly what block-by-block decoding computes
for block ``b`` once blocks ``< b`` are final, and all blocks of a row train in one forward pass.
SDPA (CPU) gets the rule's dense mask, FlexAttention (CUDA) its block-sparse mask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn

from xdllm.nn import BlockDiffusionMask, default_positions


def _both_halves(values: Optional[Tensor]) -> Optional[Tensor]:
    return None if values is None else torch.cat([values, values], dim=1)


def _two_stream_call(
    forward: Callable[..., Tensor],
    noisy: Tensor,
    clean: Tensor,
    block_size: int,
    attention_mask: Optional[Tensor],
    positions: Optional[Tensor],
    segment_ids: Optional[Tensor],
    caller: str,
) -> Tensor:
    """``forward`` over ``[noisy | clean]`` under the block-diffusion mask, cut to the noisy half."""
    if noisy.shape != clean.shape:
        raise ValueError(f"{caller}: noisy rows {tuple(noisy.shape)} and clean rows "
                         f"{tuple(clean.shape)} differ in shape")
    batch, seq_len = noisy.shape
    if positions is None:
        positions = default_positions(seq_len, attention_mask, segment_ids, noisy.device).expand(batch, seq_len)
    out = forward(torch.cat([noisy, clean], dim=1), attention_mask=_both_halves(attention_mask),
                  positions=_both_halves(positions), segment_ids=_both_halves(segment_ids),
                  mask_rule=BlockDiffusionMask(block_size))
    return out[:, :seq_len]


def denoising_logits(
    model: nn.Module,
    noisy: Integer[Tensor, "batch seq_len"],
    clean: Integer[Tensor, "batch seq_len"],
    block_size: int,
    attention_mask: Optional[Bool[Tensor, "batch seq_len"]] = None,
    positions: Optional[Integer[Tensor, "batch seq_len"]] = None,
    segment_ids: Optional[Integer[Tensor, "batch seq_len"]] = None,
) -> Float[Tensor, "batch seq_len vocab"]:
    """Logits of the noisy half of ``[noisy | clean]`` under the block-diffusion mask.

    ``positions`` default to :func:`~xdllm.nn.default_positions` (blocks are
    ``position // block_size``, counted per document).
    """
    return _two_stream_call(model, noisy, clean, block_size, attention_mask, positions, segment_ids,
                            "denoising_logits")


def denoising_hidden(
    model: nn.Module,
    noisy: Integer[Tensor, "batch seq_len"],
    clean: Integer[Tensor, "batch seq_len"],
    block_size: int,
    attention_mask: Optional[Bool[Tensor, "batch seq_len"]] = None,
    positions: Optional[Integer[Tensor, "batch seq_len"]] = None,
    segment_ids: Optional[Integer[Tensor, "batch seq_len"]] = None,
) -> Float[Tensor, "batch seq_len d_model"]:
    """What the LM head reads for the noisy half (:func:`denoising_logits` before the
    projection to the vocabulary), for the chunked loss."""
    return _two_stream_call(model.final_hidden, noisy, clean, block_size, attention_mask, positions, segment_ids,
                            "denoising_hidden")
