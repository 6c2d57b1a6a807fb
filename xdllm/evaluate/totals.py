"""Exact averages over batches, micro-batches and processes: keep ``(sum, count)``, divide last."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from xdllm.interfaces import MetricSums

Reduce = Callable[[Tensor], Tensor]
"""Sums a tensor over processes (identity in one process)."""


def count_weighted(mean: Tensor, count: Tensor) -> tuple[Tensor, Tensor]:
    """``(mean · count, count)`` in float64, a metric's ``(sum, count)`` for a batch value that is
    a mean over ``count`` items (0 where the batch has none, whatever its mean)."""
    mean, count = mean.detach().double(), count.detach().to(device=mean.device, dtype=torch.float64)
    return torch.where(count > 0, mean * count, 0.0), count


def with_total_loss(means: Mapping[str, float], terms: Sequence[str]) -> dict[str, float]:
    """``means`` with ``loss = Σ terms`` when every term is there: the split's value of a loss that
    is a sum of shares over different counts (hybrid, UDLM), each share exact over the split."""
    out = dict(means)
    if all(term in means for term in terms):
        out["loss"] = sum(means[term] for term in terms)
    return out


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

    def copy(self) -> MetricTotals:
        """Totals adding to which leaves these unchanged (the tensors are shared: adding replaces them)."""
        copied = MetricTotals()
        copied._sums = dict(self._sums)
        return copied

    def means(self, reduce: Reduce | None = None) -> dict[str, float]:
        """``Σ sum / Σ count`` per name (a name with no count gives 0.0)."""
        if not self._sums:
            return {}
        names, stacked = self._stacked()
        if reduce is not None:
            stacked = reduce(stacked)
        values = stacked.tolist()
        return {name: total / count if count > 0 else 0.0 for name, (total, count) in zip(names, values)}

    def state(self) -> dict[str, list[float]]:
        """``{name: [sum, count]}`` on the host (one copy), what :meth:`from_state` restores."""
        if not self._sums:
            return {}
        names, stacked = self._stacked()
        return dict(zip(names, stacked.tolist()))

    @classmethod
    def from_state(cls, state: Mapping[str, Sequence[float]], device: torch.device | str = "cpu") -> MetricTotals:
        """Totals holding the sums and counts of :meth:`state`, on ``device`` (where later sums arrive)."""
        totals = cls()
        for name, (total, count) in state.items():
            totals._sums[name] = (torch.tensor(float(total), dtype=torch.float64, device=device),
                                  torch.tensor(float(count), dtype=torch.float64, device=device))
        return totals

    def _stacked(self) -> tuple[list[str], Tensor]:
        names = sorted(self._sums)
        device = self._sums[names[0]][0].device
        return names, torch.stack([torch.stack([self._sums[n][0].to(device), self._sums[n][1].to(device)])
                                   for n in names])
