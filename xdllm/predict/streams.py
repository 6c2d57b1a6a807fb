"""Counter-based random numbers: one independent stream per sample, no generator state.

A uniform is a pure hash of ``(seed, sample_index, step, purpose, offset)`` where ``offset`` is
the position inside the sample's output region. Nothing depends on the batch a sample sits in,
its row, the padding, or how many draws other samples made, which is what makes the predictor's
output batch-invariant; and the whole draw for a step is a handful of vectorised integer ops.

The mixer is the 32-bit MurmurHash3 finaliser, applied in int64 and masked to 32 bits (the low
32 bits of an int64 product are exact even if the product wraps).
"""

from __future__ import annotations

from enum import IntEnum

import torch
from jaxtyping import Float, Integer
from torch import Tensor

_LOW32 = 0xFFFFFFFF


class Purpose(IntEnum):
    """Separate streams for separate uses, so that one never shifts another."""

    TOKEN = 1
    ORDER = 2
    NOISE_LEVEL = 3
    NOISE_MASK = 4
    UNMASK_TIME = 5
    REVEAL = 6
    REMASK = 7


def _fmix32(h: Tensor) -> Tensor:
    h = h & _LOW32
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _LOW32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _LOW32
    return h ^ (h >> 16)


def row_keys(seed: int, sample_index: Integer[Tensor, " batch"]) -> Integer[Tensor, " batch"]:
    """A 32-bit key per sample, mixing the run seed with the sample's global index."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    index = sample_index.to(torch.int64)
    key = _fmix32(torch.full_like(index, seed & _LOW32))
    key = _fmix32(key ^ ((seed >> 32) & _LOW32))
    key = _fmix32(key ^ (index & _LOW32))
    return _fmix32(key ^ ((index >> 32) & _LOW32))


def uniforms(keys: Integer[Tensor, " batch"], step: int, purpose: Purpose,
             width: int) -> Float[Tensor, "batch width"]:
    """``[batch, width]`` float32 uniforms in ``[0, 1)`` for output-region offsets ``0..width-1``."""
    base = _fmix32(keys ^ (step & _LOW32))
    base = _fmix32(base ^ int(purpose))
    offsets = torch.arange(width, device=keys.device, dtype=torch.int64)
    bits = _fmix32(base[:, None] ^ offsets[None, :])
    return (bits >> 8).to(torch.float32) * (1.0 / (1 << 24))
