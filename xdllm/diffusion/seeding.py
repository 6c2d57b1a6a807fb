"""Deterministic per-sample seeds, so corruption survives resume and device splits.

A sample's noise depends only on ``(base_seed, global_step, sample_index)``: not on the rank
that holds it, the micro-batch it shares, or how many samples came before it on that rank.
"""

from __future__ import annotations

from typing import Sequence

import torch

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def sample_seed(base_seed: int, global_step: int, sample_index: int) -> int:
    """A well-mixed 63-bit seed for one sample at one step."""
    for name, value in (("base_seed", base_seed), ("global_step", global_step),
                        ("sample_index", sample_index)):
        if value < 0:
            raise ValueError(f"sample_seed: {name} must be >= 0, got {value}")
    mixed = _splitmix64(base_seed)
    mixed = _splitmix64(mixed ^ global_step)
    mixed = _splitmix64(mixed ^ sample_index)
    return mixed & ((1 << 63) - 1)


def sample_generators(base_seed: int, global_step: int, sample_indices: Sequence[int],
                      device: torch.device | str = "cpu") -> list[torch.Generator]:
    """One seeded ``torch.Generator`` per sample."""
    generators = []
    for index in sample_indices:
        generator = torch.Generator(device=device)
        generator.manual_seed(sample_seed(base_seed, global_step, int(index)))
        generators.append(generator)
    return generators
