"""Deterministic per-sample seeds, so corruption survives resume and device splits.

A sample's noise depends only on ``(base_seed, global_step, sample_index)``: not on the rank
that holds it, the micro-batch it shares, or how many samples came before it on that rank.
:func:`corrupt_per_sample` applies any corruption kernel that way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from jaxtyping import Integer, Shaped
from torch import Tensor

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


def corrupt_per_sample(
    kernel: Callable[..., tuple[Tensor, Tensor, Tensor]],
    input_ids: Integer[Tensor, "batch seq_len"],
    loss_mask: Shaped[Tensor, "batch seq_len"] | None,
    *,
    base_seed: int,
    global_step: int,
    sample_indices: Sequence[int] | Integer[Tensor, " batch"],
    **kernel_kwargs: Any,
) -> tuple[Tensor, Tensor, Tensor]:
    """Run a corruption kernel so each row's noise depends only on (seed, step, sample index).

    Row ``i`` is corrupted by ``kernel`` on its own, with the generator of
    ``sample_indices[i]`` from :func:`sample_generators`; the rows are then stacked. Splitting a
    global batch across devices, or resuming at a step, therefore reproduces every sample's
    noise exactly. ``kernel_kwargs`` (``mask_token_id``, ``block_size``, ...) go to every call.
    The per-row loop costs one small kernel launch per sample: the price of layout-independent
    noise (``scripts/bench_kernels.py`` measures it).
    """
    if "generator" in kernel_kwargs:
        raise ValueError("corrupt_per_sample: pass no generator; each row gets its own from the seeds")
    indices = sample_indices.tolist() if isinstance(sample_indices, Tensor) else list(sample_indices)
    if len(indices) != input_ids.shape[0]:
        raise ValueError(
            f"corrupt_per_sample: {len(indices)} sample_indices for a batch of {input_ids.shape[0]} rows"
        )
    if not indices:
        return kernel(input_ids, loss_mask, **kernel_kwargs)
    generators = sample_generators(base_seed, global_step, indices, device=input_ids.device)
    rows = [
        kernel(
            input_ids[row : row + 1],
            None if loss_mask is None else loss_mask[row : row + 1],
            generator=generator,
            **kernel_kwargs,
        )
        for row, generator in enumerate(generators)
    ]
    noisy, noise_mask, p_mask = (torch.cat(parts) for parts in zip(*rows))
    return noisy, noise_mask, p_mask
