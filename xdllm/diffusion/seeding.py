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


def _row_extents(loss_mask: Tensor | None, batch: int, seq_len: int, block_size: int | None) -> list[int]:
    """Columns each row's noise is drawn over: through its last supervised position, rounded up
    to whole blocks; the padded batch width never enters (0: a row with nothing supervised)."""
    if loss_mask is None:
        return [seq_len] * batch
    columns = torch.arange(1, seq_len + 1, device=loss_mask.device)
    extents = (loss_mask * columns).amax(-1)  # the last supervised column, counted from 1; 0 if none
    if block_size:
        extents = (-(-extents // block_size) * block_size).clamp(max=seq_len)
    return extents.tolist()


def corrupt_per_sample(
    kernel: Callable[..., tuple[Tensor, Tensor, Tensor]],
    input_ids: Integer[Tensor, "batch seq_len"],
    loss_mask: Shaped[Tensor, "batch seq_len"] | None,
    *,
    base_seed: int,
    global_step: int | Sequence[int] | Integer[Tensor, " batch"],
    sample_indices: Sequence[int] | Integer[Tensor, " batch"],
    **kernel_kwargs: Any,
) -> tuple[Tensor, Tensor, Tensor]:
    """Run a corruption kernel so each row's noise depends only on (seed, step, sample index).

    Row ``i`` is corrupted by ``kernel`` on its own, with the generator seeded from
    ``(base_seed, global_step[i], sample_indices[i])`` (``global_step`` may be one step for the
    whole batch), over its own extent: columns up to its last supervised position, rounded up to
    whole ``block_size`` blocks. So neither the rank a sample lands on, nor the samples beside
    it, nor how far the batch is padded changes its noise; a resumed run reproduces it exactly.
    Columns past the extent keep their token, are never in ``noise_mask`` and repeat the last
    ``p_mask`` value of the extent. ``kernel_kwargs`` (``mask_token_id``, ``block_size``, ...) go
    to every call. The per-row loop costs one small kernel launch per sample: the price of
    layout-independent noise (``scripts/bench_kernels.py`` measures it).
    """
    if "generator" in kernel_kwargs:
        raise ValueError("corrupt_per_sample: pass no generator; each row gets its own from the seeds")
    indices = sample_indices.tolist() if isinstance(sample_indices, Tensor) else list(sample_indices)
    batch, seq_len = input_ids.shape
    if isinstance(global_step, int):
        steps = [global_step] * len(indices)
    else:
        steps = global_step.tolist() if isinstance(global_step, Tensor) else list(global_step)
    if len(indices) != batch or len(steps) != batch:
        raise ValueError(f"corrupt_per_sample: {len(indices)} sample_indices and {len(steps)} "
                         f"global steps for a batch of {batch} rows")
    if not indices:
        return kernel(input_ids, loss_mask, **kernel_kwargs)
    if loss_mask is not None:
        loss_mask = loss_mask.bool()
    extents = _row_extents(loss_mask, batch, seq_len, kernel_kwargs.get("block_size"))
    # each row's outputs over its extent, padded to the full width (a row with nothing supervised:
    # its tokens, no noise, p_mask 1), then placed with three copies rather than four per row
    noisy, noise_mask = input_ids.clone(), torch.zeros(input_ids.shape, dtype=torch.bool,
                                                       device=input_ids.device)
    p_mask = torch.ones(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    for row, (index, step, extent) in enumerate(zip(indices, steps, extents)):
        if extent == 0:
            continue
        generator = torch.Generator(device=input_ids.device)
        generator.manual_seed(sample_seed(base_seed, int(step), int(index)))
        row_noisy, row_noise, row_p = kernel(
            input_ids[row:row + 1, :extent],
            None if loss_mask is None else loss_mask[row:row + 1, :extent],
            generator=generator, **kernel_kwargs)
        if extent == seq_len:
            noisy[row], noise_mask[row], p_mask[row] = row_noisy[0], row_noise[0], row_p[0]
        else:
            noisy[row, :extent] = row_noisy[0]
            noise_mask[row, :extent] = row_noise[0]
            p_mask[row, :extent] = row_p[0]
            p_mask[row, extent:] = row_p[0, -1]
    return noisy, noise_mask, p_mask
