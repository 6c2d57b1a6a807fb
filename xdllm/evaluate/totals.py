"""Exact averages over batches, micro-batches and processes: keep ``(sum, count)``, divide last."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from xdllm.interfaces import MetricSums

Reduce = Callable[[Tensor], Tensor]
"""Sums a tensor over processes (identity in one process)."""


class MetricTotals:
    """Running ``(sum, count)`` per metric name, on the device the sums arrive on.

    Adding never synchronises with the device; :meth:`means` copies everything to the host
    once (after an optional cross-process sum of one stacked tensor).
    """

    def __init__(self) -> None:
        self._sums: dict[str, tuple[Tensor, Tensor]] = {}

    def add(self, sums: MetricSums) -> None:
        for name, (total, count) in sums.items():
            total, count = total.detach().double(), count.detach().double()
            if name in self._sums:
                old_total, old_count = self._sums[name]
                total, count = old_total + total.to(old_total.device), old_count + count.to(old_count.device)
            self._sums[name] = (total, count)

    def __bool__(self) -> bool:
        return bool(self._sums)

    def means(self, reduce: Reduce | None = None) -> dict[str, float]:
        """``Σ sum / Σ count`` per name (a name with no count gives 0.0)."""
        if not self._sums:
            return {}
        names = sorted(self._sums)
        device = self._sums[names[0]][0].device
        stacked = torch.stack([torch.stack([self._sums[n][0].to(device), self._sums[n][1].to(device)])
                               for n in names])
        if reduce is not None:
            stacked = reduce(stacked)
        values = stacked.tolist()
        return {name: total / count if count > 0 else 0.0 for name, (total, count) in zip(names, values)}
