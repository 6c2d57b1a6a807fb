"""Per-step statistics over every sample of a set of history files, for the scalar views.

- tokens committed per step: at each step number, the mean, standard deviation (population),
  minimum and maximum over the samples that ran that step;
- forward passes per sample: the steps each sample ran (one forward pass per step).

Accumulated file by file from the stored tensors (no per-sample objects), grouped by split.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from xdllm.history.reader import HistoryFile


@dataclass
class CommitCounts:
    """Running sums of the tokens committed at one step number, over the samples that ran it."""

    samples: int = 0
    total: float = 0.0
    squares: float = 0.0
    low: float = float("inf")
    high: float = float("-inf")

    def add(self, samples: int, total: float, squares: float, low: float, high: float) -> None:
        self.samples += samples
        self.total += total
        self.squares += squares
        self.low = min(self.low, low)
        self.high = max(self.high, high)

    @property
    def mean(self) -> float:
        return self.total / self.samples

    @property
    def std(self) -> float:
        return max(self.squares / self.samples - self.mean**2, 0.0) ** 0.5


@dataclass
class SplitStatistics:
    """One split's tokens committed per step number and forward passes per sample id."""

    committed: dict[int, CommitCounts] = field(default_factory=lambda: defaultdict(CommitCounts))
    forward_passes: dict[int, int] = field(default_factory=dict)


class DenoisingStatistics:
    """Add files with :meth:`add`; read ``splits[name]`` (split names as in the views)."""

    def __init__(self) -> None:
        self.splits: dict[str, SplitStatistics] = defaultdict(SplitStatistics)

    def add(self, history: HistoryFile, split: str) -> None:
        data = history.raw
        active = data["active"]  # [B, S]
        counts = data["committed"].sum(dim=2).double()  # [B, S]
        per_step = zip(
            data["steps"].tolist(),
            active.sum(dim=0).tolist(),
            (counts * active).sum(dim=0).tolist(),
            (counts * counts * active).sum(dim=0).tolist(),
            counts.masked_fill(~active, float("inf")).min(dim=0).values.tolist() if len(active) else [],
            counts.masked_fill(~active, float("-inf")).max(dim=0).values.tolist() if len(active) else [],
        )
        statistics = self.splits[split]
        for step, samples, total, squares, low, high in per_step:
            if samples:
                statistics.committed[step].add(samples, total, squares, low, high)
        statistics.forward_passes.update(zip(data["sample_ids"].tolist(), data["num_steps"].tolist()))
