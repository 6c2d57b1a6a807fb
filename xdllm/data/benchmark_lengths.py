"""Document lengths for the packing benchmarks: long-tailed, as real corpora are."""

from __future__ import annotations

import math

import torch

SHORTEST = 8


def long_tailed_lengths(count: int, row_length: int, sigma: float, seed: int) -> list[int]:
    """Log-normal lengths with spread ``sigma``, clipped to ``[8, row_length]``, whose mean after
    clipping is a quarter of the row (the log-normal's location found by bisection)."""
    normal = torch.randn(count, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * sigma

    def lengths_at(location: float) -> torch.Tensor:
        return (normal + location).exp().round().clamp(SHORTEST, row_length)

    low, high = 0.0, math.log(row_length)
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if lengths_at(middle).mean() < row_length / 4 else (low, middle)
    return lengths_at(low).long().tolist()
