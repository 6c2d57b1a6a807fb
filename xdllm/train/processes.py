"""Where a piece of validation work runs: this process's place among the training processes,
and how to collect a tensor from all of them (what a validation probe needs to split its work)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class Processes:
    """This process's ``rank`` of ``count``; ``gather`` takes a tensor of the same shape on every
    process and returns them all stacked in rank order, ``[count, ...]``, on every process."""

    rank: int
    count: int
    gather: Callable[[Tensor], Tensor]

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.count:
            raise ValueError(f"Processes: rank {self.rank} is not in [0, {self.count})")


ONE_PROCESS = Processes(0, 1, lambda tensor: tensor[None])
"""A run on one process: nothing to split, its own tensor is the whole gather."""
