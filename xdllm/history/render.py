"""A step-by-step view of a :class:`SampleHistory`, shared by the TensorBoard and terminal views.

It decides what a reader sees at each step: the canvas (masked, given, committed earlier,
committed at this step, or changed at this step without a commit, as a predictor that revises
its canvas writes; and whether a token differs from the target), and the top-k alternatives of
the positions committed, changed or taken back (masked again, by a remasking predictor) at the
step and of the positions still masked after it.
Positions are counted from the sample's output start (0 = first output token). The front ends
only format it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from xdllm.history.format import HistoryError
from xdllm.history.reader import SampleHistory
from xdllm.history.view_defaults import DEFAULT_MASKED_POSITIONS

CellState = Literal["masked", "committed", "changed", "fixed"]
WRONG_MARK = "✗"


@dataclass(frozen=True)
class Cell:
    """One output position after a step: its token text, state and whether it is wrong."""

    text: str
    state: CellState
    wrong: bool = False


@dataclass(frozen=True)
class PositionView:
    """The top-k of one position at a step: committed, changed or taken back at the step, or
    still masked after it.

    ``token`` is the token written (for a position taken back: the token it held; '' while
    masked); ``confidence`` the predictor's score at the commit (NaN while masked, when only
    changed or taken back, or when a later re-commit replaced it in the file).
    """

    position: int
    state: Literal["committed", "changed", "taken_back", "masked"]
    token: str
    confidence: float
    wrong: bool
    alternatives: list[tuple[str, float]]


@dataclass(frozen=True)
class StepView:
    """One step: ``cells`` (every output position), ``positions`` (committed and changed ones,
    then up to the cap of masked ones, in position order), ``hidden_masked`` masked positions
    left out by the cap and ``unscored_masked`` masked positions the step did not score (the
    later blocks of a block-wise predictor: no top-k to show). ``changed`` counts tokens changed
    without a commit, ``taken_back`` tokens masked again (they count as masked too); ``wrong``
    counts wrong tokens on the canvas (None without a target)."""

    step: int
    row: int
    num_steps: int
    committed: int
    changed: int
    masks_remaining: int
    wrong: int | None
    cells: list[Cell]
    positions: list[PositionView]
    hidden_masked: int
    unscored_masked: int
    taken_back: int = 0


VISIBLE_WHITESPACE = {" ": "␣", "\n": "⏎", "\t": "⇥"}
MASK_GLYPH = "_"
"""How the text views show a masked position."""


def visible_token(text: str) -> str:
    """Make every character of a token visible: space, newline and tab as symbols, other
    characters that print nothing (byte-level BPE's control bytes, zero-width marks) as Python
    escapes (``\\x16``), the empty token as ``∅``, and a token that is the mask's glyph (a text
    tokenizer's ``_``, common in code) quoted, ``'_'``, so that it does not read as a mask."""
    if text == "":
        return "∅"
    if text == MASK_GLYPH:
        return f"'{MASK_GLYPH}'"
    return "".join(VISIBLE_WHITESPACE.get(char) or (char if char.isprintable() else ascii(char)[1:-1])
                   for char in text)


EMPTY_OUTPUT = "(empty)"


def output_text(text: str) -> str:
    """A sample's decoded output as the views show it: an empty one said to be empty (the line
    read as if the output were missing)."""
    return text or EMPTY_OUTPUT


def result_summary(sample: SampleHistory) -> str | None:
    """How many target tokens the final canvas gets right, as the evaluator counts them
    (``None`` without a target or without steps)."""
    correct = sample.correct_tokens
    if correct is None:
        return None
    length = sample.reference_length
    wrong = sample.wrong[-1]
    never = int((sample.masked[-1] & wrong).sum())
    verdict = "exact match" if correct == length else f"{length - correct} wrong, marked {WRONG_MARK}"
    if never:
        verdict += f"; {never} of them never generated, _{WRONG_MARK}"
    if sample.output_ids is not None:
        replaced = int((wrong & ~sample.masked[-1] & (sample.output_ids != sample.canvas[-1])).sum())
        if replaced:
            verdict += (f"; {replaced} of them replaced in the output after the last step "
                        "(e.g. padding after its first EOS)")
    return f"{correct} of {length} target tokens right ({verdict})"


def step_views(
    sample: SampleHistory,
    k: int | None = None,
    token_text: Callable[[int], str] | None = None,
    masked_positions: int | None = DEFAULT_MASKED_POSITIONS,
) -> list[StepView]:
    """Every step of ``sample``, ascending, with ``k`` alternatives (default all recorded) and
    the top-k of at most ``masked_positions`` masked positions per step (``None``: all).

    ``token_text`` overrides the stored token strings (e.g. ``xdllm.data.tokenizer.token_display``).
    """
    k = sample.k if k is None else k
    if not 1 <= k <= sample.k:
        raise HistoryError(f"k={k} out of range: this history stores top-{sample.k} (1..{sample.k})")
    if masked_positions is not None and masked_positions < 0:
        raise HistoryError(f"masked_positions must be >= 0, got {masked_positions}")
    name = token_text or sample.token
    strings: dict[int, str] = {}

    def text(token: int) -> str:
        if token not in strings:
            strings[token] = visible_token(name(token))
        return strings[token]

    canvas = sample.canvas.tolist()
    masked = sample.masked.tolist()
    committed = sample.committed.tolist()
    rewritten = sample.rewritten.tolist()
    taken_back = sample.taken_back.tolist()
    before = sample.canvas_before.tolist()
    wrong_grid = sample.wrong
    wrong = wrong_grid.tolist() if wrong_grid is not None else [[False] * len(row) for row in canvas]
    top_ids = sample.topk_ids[..., :k].tolist()
    top_probs = sample.topk_probs[..., :k].tolist()
    confidence = sample.commit_confidence.tolist()
    views = []
    pad = sample.pad_token_id
    for s, step in enumerate(sample.steps.tolist()):
        # padding a predictor writes after a settled EOS is recorded as committed, but with no
        # prediction behind it (every recorded probability 0): shown as a plain cell, not a commit
        cells = [
            Cell(text(token), "masked" if masked[s][j] else "fixed" if token == pad and not any(top_probs[s][j])
                 else "committed" if committed[s][j] else "changed" if rewritten[s][j] else "fixed", wrong[s][j])
            for j, token in enumerate(canvas[s])
        ]
        still_masked = [j for j, cell in enumerate(cells) if cell.state == "masked"]
        taken = [j for j in still_masked if taken_back[s][j]]
        # a block-wise predictor scores only its current block: later blocks have no top-k yet
        scored_masked = [j for j in still_masked if any(p > 0 for p in top_probs[s][j]) and not taken_back[s][j]]
        shown_masked = scored_masked if masked_positions is None else scored_masked[:masked_positions]
        listed = sorted([j for j, cell in enumerate(cells) if cell.state in ("committed", "changed")]
                        + taken + shown_masked)
        positions = [
            PositionView(
                position=j,
                state="taken_back" if taken_back[s][j] else cells[j].state,
                token=text(before[s][j]) if taken_back[s][j] else "" if cells[j].state == "masked" else cells[j].text,
                confidence=confidence[s][j] if cells[j].state == "committed" else math.nan,
                wrong=cells[j].wrong,
                # a position taken back was not masked in this step's input: its top-k there is
                # not what the model predicts for a mask, nor what the predictor used
                alternatives=[] if taken_back[s][j] else [(text(t), p) for t, p in zip(top_ids[s][j], top_probs[s][j])],
            )
            for j in listed
        ]
        views.append(StepView(
            step=step, row=s, num_steps=sample.num_steps,
            committed=sum(cell.state == "committed" for cell in cells),
            changed=sum(cell.state == "changed" for cell in cells),
            masks_remaining=len(still_masked),
            wrong=None if wrong_grid is None else sum(cell.wrong for cell in cells),
            cells=cells, positions=positions, hidden_masked=len(scored_masked) - len(shown_masked),
            unscored_masked=len(still_masked) - len(taken) - len(scored_masked), taken_back=len(taken),
        ))
    return views
