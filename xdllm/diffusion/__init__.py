"""Diffusion corruption kernels and per-sample seeding (SPEC.md section 1)."""

from xdllm.diffusion.corruption import (
    _batched_gumbel_topk,
    corrupt_blockwise,
    corrupt_uniform,
    corrupt_uniform_random,
    gumbel_topk,
)
from xdllm.diffusion.seeding import corrupt_per_sample, sample_generators, sample_seed

__all__ = [
    "_batched_gumbel_topk",
    "corrupt_blockwise",
    "corrupt_per_sample",
    "corrupt_uniform",
    "corrupt_uniform_random",
    "gumbel_topk",
    "sample_generators",
    "sample_seed",
]
