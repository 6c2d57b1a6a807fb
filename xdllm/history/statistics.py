"""Per-step statistics over every sample of a set of history files, for the scalar views.

- tokens committed per step: at each step number, the mean, standard deviation (population),
  minimum and maximum over the samples that ran that step;
- tokens changed per step: the same for the tokens whose value changed at the step, and whether
  any changed without a commit (a predictor that revises its canvas);
- tokens taken back per step: the same for the tokens masked again at the step (a remasking
  predictor), and whether any was;
- forward passes per sample: the steps each sample ran (one forward pass per step).

Accumulated file by file from the stored tensors (no per-sample objects), grouped by split.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch import Tensor

from xdllm.history.reader import HistoryFile


@dataclass
class CommitCounts:
    """Running sums of the tokens committed (or changed) at one step number, over the samples
    that ran it."""

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
    """One split's tokens committed, changed and taken back per step number, whether a token ever
    changed to another without a commit (``rewrites``) or was masked again (``remasks``), and
    forward passes per sample id."""

    committed: dict[int, CommitCounts] = field(default_factory=lambda: defaultdict(CommitCounts))
    changed: dict[int, CommitCounts] = field(default_factory=lambda: defaultdict(CommitCounts))
    taken_back: dict[int, CommitCounts] = field(default_factory=lambda: defaultdict(CommitCounts))
    rewrites: bool = False
    remasks: bool = False
    forward_passes: dict[int, int] = field(default_factory=dict)


class DenoisingStatistics:
    """Add files with :meth:`add`; read ``splits[name]`` (split names as in the views)."""

    def __init__(self) -> None:
        self.splits: dict[str, SplitStatistics] = defaultdict(SplitStatistics)

    def add(self, history: HistoryFile, split: str) -> None:
        data = history.raw
        statistics = self.splits[split]
        canvas = data["canvas"]  # [B, S, R]
        before = torch.cat([data["initial_canvas"][:, None], canvas[:, :-1]], dim=1)
        changed = canvas != before
        rewritten = changed & ~data["committed"]
        for special in (data["mask_token_id"], data.get("pad_token_id")):
            if special is not None:
                rewritten &= canvas != special
        statistics.rewrites |= bool(rewritten.any())
        mask = data["mask_token_id"]
        if mask is not None:
            taken_back = (canvas == mask) & (before != mask)
            statistics.remasks |= bool(taken_back.any())
            _add_counts(statistics.taken_back, data["steps"], data["active"], taken_back.sum(dim=2).double())
        _add_counts(statistics.committed, data["steps"], data["active"], data["committed"].sum(dim=2).double())
        _add_counts(statistics.changed, data["steps"], data["active"], changed.sum(dim=2).double())
        statistics.forward_passes.update(zip(data["sample_ids"].tolist(), data["num_steps"].tolist()))


def _add_counts(by_step: dict[int, CommitCounts], steps: Tensor, active: Tensor, counts: Tensor) -> None:
    """Add per-sample counts ``[B, S]`` of the steps ``[S]`` the samples ran (``active``)."""
    per_step = zip(
        steps.tolist(),
        active.sum(dim=0).tolist(),
        (counts * active).sum(dim=0).tolist(),
        (counts * counts * active).sum(dim=0).tolist(),
        counts.masked_fill(~active, float("inf")).min(dim=0).values.tolist() if len(active) else [],
        counts.masked_fill(~active, float("-inf")).max(dim=0).values.tolist() if len(active) else [],
    )
    for step, samples, total, squares, low, high in per_step:
        if samples:
            by_step[step].add(samples, total, squares, low, high)
