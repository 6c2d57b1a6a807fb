"""RoPE positions that start every response on a block boundary.

The hybrid counts blocks from positions (``position // block_size``, as every block rule of
:mod:`xdllm.nn.masks` does), but its blocks are the response's: the response is cut into whole
blocks from its first token (``DLLMCollator``'s response window). So each row's positions are
shifted by ``(-response_start) mod block_size``, which puts the response's first token on a
multiple of ``block_size`` and the prompt in earlier blocks. RoPE attention depends only on
position differences, so the shift changes nothing else; it costs at most ``block_size - 1``
positions of ``max_positions``.
"""

from __future__ import annotations

from jaxtyping import Integer
from torch import Tensor


def block_offset(response_start: Integer[Tensor, " batch"], block_size: int) -> Integer[Tensor, " batch"]:
    """The shift that moves position ``response_start`` onto a multiple of ``block_size``."""
    return (-response_start) % block_size


def block_aligned_positions(positions: Integer[Tensor, "batch seq_len"],
                            response_start: Integer[Tensor, " batch"],
                            block_size: int) -> Integer[Tensor, "batch seq_len"]:
    """``positions`` shifted per row so that position ``response_start`` starts a block."""
    return positions + block_offset(response_start, block_size)[:, None]
