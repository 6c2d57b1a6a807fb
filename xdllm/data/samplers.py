"""Batch samplers: an infinite training stream laid out by optimizer step and rank, and even
evaluation shards.

Training: stream position ``p`` names one sample. With per-rank micro-batch ``b``, world size
``W`` and ``a`` accumulation micro-batches per optimizer step, micro-batch ``k`` (counted over the
whole run, ``k = step * a + m``) gives rank ``r`` the positions
``[k*b*W + r*b, k*b*W + (r+1)*b)``. The first step and its first position are read from callables
when iteration starts, so a resumed run continues at exactly the next unseen position: the data
of step ``s`` depends only on ``s``, never on how the run got there. A run resumed with another
global batch (``b * W * a``: a new batch size, process count or accumulation) goes on from the
position its checkpoint reached, neither reading samples again nor skipping any. One item of
the sampler is one optimizer step: this rank's ``a`` micro-batches, concatenated
(:class:`MicroBatchCollate` splits them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple


class StreamIndex(NamedTuple):
    """A training sample's stream position and the optimizer step that consumes it."""

    position: int
    step: int


def _check_rank(rank: int, world_size: int, where: str) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"{where}: need world_size >= 1 and 0 <= rank < world_size, got rank {rank}, "
                         f"world_size {world_size}")


class TrainStreamBatchSampler:
    """Yields this rank's samples of each optimizer step, from ``start_step()`` to ``max_steps``:
    its ``accumulate_grad_batches`` micro-batches of :class:`StreamIndex`, concatenated.

    ``start_step`` is called at every ``iter()``: pass a reader of the trainer's global step so
    that resuming needs no sampler state. ``origin`` (called then too) gives a step and the
    stream position of its first sample; the steps after it follow at this sampler's global
    batch. The default ``(0, 0)`` lays the whole run out at one global batch; a run resumed
    with another one passes the step and position its checkpoint reached.
    ``max_steps=None`` streams forever.
    """

    def __init__(self, batch_size: int, start_step: Callable[[], int], rank: int = 0, world_size: int = 1,
                 accumulate_grad_batches: int = 1, max_steps: int | None = None,
                 origin: Callable[[], tuple[int, int]] = lambda: (0, 0)) -> None:
        _check_rank(rank, world_size, "TrainStreamBatchSampler")
        if batch_size < 1 or accumulate_grad_batches < 1:
            raise ValueError(f"TrainStreamBatchSampler: batch_size and accumulate_grad_batches must be >= 1, "
                             f"got {batch_size} and {accumulate_grad_batches}")
        if max_steps is not None and max_steps < 0:
            raise ValueError(f"TrainStreamBatchSampler: max_steps must be >= 0 or None, got {max_steps}")
        self.batch_size = batch_size
        self.start_step = start_step
        self.rank = rank
        self.world_size = world_size
        self.accumulate_grad_batches = accumulate_grad_batches
        self.max_steps = max_steps
        self.origin = origin

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step over every rank."""
        return self.batch_size * self.world_size * self.accumulate_grad_batches

    def micro_batch(self, index: int, shift: int = 0) -> list[StreamIndex]:
        """This rank's share of micro-batch ``index`` (counted from the start of the run), its
        positions moved by ``shift``."""
        step = index // self.accumulate_grad_batches
        first = shift + (index * self.world_size + self.rank) * self.batch_size
        return [StreamIndex(position, step) for position in range(first, first + self.batch_size)]

    def __iter__(self) -> Iterator[list[StreamIndex]]:
        start_step = self.start_step()
        if start_step < 0:
            raise ValueError(f"TrainStreamBatchSampler: start step must be >= 0, got {start_step}")
        origin_step, origin_position = self.origin()
        shift = origin_position - origin_step * self.global_batch
        step = start_step
        while self.max_steps is None or step < self.max_steps:
            first = step * self.accumulate_grad_batches
            yield [index for micro in range(first, first + self.accumulate_grad_batches)
                   for index in self.micro_batch(micro, shift)]
            step += 1


class MicroBatchCollate:
    """Collates one optimizer step's samples into its list of micro-batches of ``batch_size``."""

    def __init__(self, collate: Callable[[list], Any], batch_size: int) -> None:
        self.collate = collate
        self.batch_size = batch_size

    def __call__(self, samples: list) -> list[Any]:
        if len(samples) % self.batch_size:
            raise ValueError(f"MicroBatchCollate: {len(samples)} samples are not whole micro-batches "
                             f"of {self.batch_size}")
        return [self.collate(samples[start:start + self.batch_size])
                for start in range(0, len(samples), self.batch_size)]


def even_shard_batches(num_samples: int, batch_size: int, rank: int = 0, world_size: int = 1) -> list[list[int]]:
    """Rank ``rank``'s evaluation batches: every sample exactly once, the same batch count on every rank.

    Sample ``i`` goes to rank ``i % world_size`` (shares differ by at most one sample); each
    rank splits its share into ``ceil(ceil(num_samples / world_size) / batch_size)`` batches whose
    sizes differ by at most one. Nothing is dropped or duplicated, and ranks that run one
    collective per batch stay in step. When that would need an empty batch (fewer samples than
    ranks, or ``batch_size=1`` with an uneven split) it is a ``ValueError``.
    """
    _check_rank(rank, world_size, "even_shard_batches")
    if batch_size < 1:
        raise ValueError(f"even_shard_batches: batch_size must be >= 1, got {batch_size}")
    share = list(range(rank, num_samples, world_size))
    num_batches = math.ceil(math.ceil(num_samples / world_size) / batch_size)
    smallest_share = num_samples // world_size
    if num_batches > smallest_share:
        raise ValueError(f"even_shard_batches: {num_samples} samples cannot be split into {num_batches} "
                         f"non-empty batches on each of {world_size} ranks (batch_size {batch_size}); "
                         "use a sample count divisible by the world size or a larger batch size")
    base, extra = divmod(len(share), num_batches)
    batches, start = [], 0
    for batch in range(num_batches):
        size = base + (batch < extra)
        batches.append(share[start:start + size])
        start += size
    return batches


class FixedBatchSampler:
    """Yields a precomputed list of batches (for evaluation shards); has a length."""

    def __init__(self, batches: list[list[int]]) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)
