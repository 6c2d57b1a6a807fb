"""The block-diffusion training forward: one pass over ``[x_t | x_0]`` trains every block.

The network sees each row twice, the noisy copy then the clean one, with the same positions
(and document ids) in both halves, under :class:`~xdllm.nn.BlockDiffusionMask`: a noisy block
attends to itself and to the clean blocks before it, a clean block to the clean blocks up to
itself. So the logits of noisy block ``b`` are exactly what block-by-block decoding computes
for block ``b`` once blocks ``< b`` are final, and all blocks of a row train in one forward pass.
SDPA (CPU) gets the rule's dense mask, FlexAttention (CUDA) its block-sparse mask.
"""

from __future__ import annotations

from typing import Optional

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn

from xdllm.nn import BlockDiffusionMask, default_positions


def _both_halves(values: Optional[Tensor]) -> Optional[Tensor]:
    return None if values is None else torch.cat([values, values], dim=1)


def denoising_logits(
    model: nn.Module,
    noisy: Integer[Tensor, "batch seq_len"],
    clean: Integer[Tensor, "batch seq_len"],
    block_size: int,
    attention_mask: Optional[Bool[Tensor, "batch seq_len"]] = None,
    positions: Optional[Integer[Tensor, "batch seq_len"]] = None,
    segment_ids: Optional[Integer[Tensor, "batch seq_len"]] = None,
    *,
    hidden_only: bool = False,
) -> Float[Tensor, "batch seq_len features"]:
    """Logits of the noisy half of ``[noisy | clean]`` under the block-diffusion mask; with
    ``hidden_only``, what the LM head reads for it (``model.final_hidden``), for the chunked loss.

    ``positions`` default to :func:`~xdllm.nn.default_positions` (blocks are
    ``position // block_size``, counted per document).
    """
    if noisy.shape != clean.shape:
        raise ValueError(f"denoising_logits: noisy rows {tuple(noisy.shape)} and clean rows "
                         f"{tuple(clean.shape)} differ in shape")
    batch, seq_len = noisy.shape
    if positions is None:
        positions = default_positions(seq_len, attention_mask, segment_ids, noisy.device).expand(batch, seq_len)
    forward = model.final_hidden if hidden_only else model
    out = forward(torch.cat([noisy, clean], dim=1), attention_mask=_both_halves(attention_mask),
                  positions=_both_halves(positions), segment_ids=_both_halves(segment_ids),
                  mask_rule=BlockDiffusionMask(block_size))
    return out[:, :seq_len]
