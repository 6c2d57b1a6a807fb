"""A step-by-step view of a :class:`SampleHistory`, shared by the TensorBoard and terminal views.

It decides what a reader sees at each step (which tokens are masked, fixed or just committed,
and the alternatives of each commit); the two front ends only format it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from xdllm.history.format import HistoryError
from xdllm.history.reader import SampleHistory

CellState = Literal["masked", "committed", "fixed"]


@dataclass(frozen=True)
class Cell:
    """One region position after a step: its token text and whether it is new, old or masked."""

    text: str
    state: CellState


@dataclass(frozen=True)
class Commit:
    """A position committed at a step: the token written, its confidence, the top-k."""

    position: int
    token: str
    confidence: float
    alternatives: list[tuple[str, float]]


@dataclass(frozen=True)
class StepView:
    step: int
    masks_remaining: int
    cells: list[Cell]
    commits: list[Commit]


def visible_token(text: str) -> str:
    """Make whitespace-only and empty tokens visible (space, newline, tab, empty)."""
    if text == "":
        return "∅"
    return text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥")


def step_views(
    sample: SampleHistory,
    k: int | None = None,
    token_text: Callable[[int], str] | None = None,
) -> list[StepView]:
    """Every step of ``sample`` as a :class:`StepView`, with ``k`` alternatives (default all).

    ``token_text`` overrides the stored token strings (e.g. a tokenizer's ``id_to_token``).
    """
    k = sample.k if k is None else k
    if not 1 <= k <= sample.k:
        raise HistoryError(f"k={k} out of range: this history stores top-{sample.k} (1..{sample.k})")
    name = token_text or sample.token
    canvas = sample.canvas.tolist()
    masked = sample.masked.tolist()
    committed = sample.committed.tolist()
    top_ids = sample.topk_ids[..., :k].tolist()
    top_probs = sample.topk_probs[..., :k].tolist()
    confidence = sample.confidence_at_commit.tolist()
    commit_step = sample.commit_step.tolist()
    remaining = sample.masks_remaining.tolist()
    views = []
    for s, step in enumerate(sample.steps.tolist()):
        cells = [
            Cell(
                visible_token(name(token)),
                "masked" if masked[s][j] else "committed" if committed[s][j] else "fixed",
            )
            for j, token in enumerate(canvas[s])
        ]
        commits = [
            Commit(
                position=sample.output_start + j,
                token=visible_token(name(canvas[s][j])),
                # the stored confidence is that of the position's last commit
                confidence=confidence[j] if commit_step[j] == step else math.nan,
                alternatives=[
                    (visible_token(name(t)), p) for t, p in zip(top_ids[s][j], top_probs[s][j])
                ],
            )
            for j in range(len(canvas[s]))
            if committed[s][j]
        ]
        views.append(StepView(step, remaining[s], cells, commits))
    return views

