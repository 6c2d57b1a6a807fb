"""Diffusion corruption kernels and per-sample seeding (docs/corruption.md).

``_batched_gumbel_topk`` keeps the seed API's name and lives in :mod:`xdllm.diffusion.corruption`.
"""

from xdllm.diffusion.corruption import (
    corrupt_blockwise,
    corrupt_uniform,
    corrupt_uniform_random,
    gumbel_topk,
)
from xdllm.diffusion.seeding import corrupt_per_sample, sample_generators, sample_seed

__all__ = [
    "corrupt_blockwise",
    "corrupt_per_sample",
    "corrupt_uniform",
    "corrupt_uniform_random",
    "gumbel_topk",
    "sample_generators",
    "sample_seed",
]
