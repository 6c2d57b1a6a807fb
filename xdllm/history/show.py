"""A plain-text replay of one sample's denoising, for ``xdllm history show``.

A header (prompt, target, output, steps), then per step in ascending order: the canvas with
masks as ``_``, the tokens committed at that step highlighted (ANSI bold green with colour,
``*token*`` without), tokens changed without a commit (a predictor revising its canvas) in
yellow or ``~token~``, and wrong tokens (against the target) followed by ``✗``; then one line per
committed, changed, taken-back (masked again by a remasking predictor: ``_ taken back (was
token)``) or still-masked position (capped) with its top-k alternatives. Positions count from
the output start (0 = first output token).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from xdllm.counted import counted
from xdllm.history.format import HistoryError
from xdllm.history.reader import SampleHistory
from xdllm.history.render import (
    MASK_GLYPH,
    WRONG_MARK,
    Cell,
    StepView,
    output_text,
    result_summary,
    step_views,
    visible_token,
)
from xdllm.history.view_defaults import DEFAULT_MASKED_POSITIONS

_BOLD_GREEN = "\033[1;32m"
_BOLD_RED = "\033[1;31m"
_YELLOW = "\033[33m"
_RED = "\033[31m"
_DIM = "\033[2m"
_RESET = "\033[0m"


def format_replay(
    sample: SampleHistory,
    step: int | None = None,
    k: int | None = None,
    color: bool = False,
    token_text: Callable[[int], str] | None = None,
    masked_positions: int | None = DEFAULT_MASKED_POSITIONS,
) -> str:
    """The replay of ``sample`` (only step number ``step`` when given) with ``k`` alternatives
    and the top-k of at most ``masked_positions`` masked positions per step (None: all)."""
    views = step_views(sample, k=k, token_text=token_text, masked_positions=masked_positions)
    if step is not None:
        views = [view for view in views if view.step == step]
        if not views:
            raise HistoryError(
                f"sample {sample.sample_id} has no step {step} (steps: {_step_range(sample)})"
            )
    lines = _header(sample, token_text or sample.token)
    for view in views:
        lines += _step_lines(view, color)
    return "\n".join(lines)


def _header(sample: SampleHistory, name: Callable[[int], str]) -> list[str]:
    def tokens(ids) -> str:
        return " ".join(visible_token(name(i)) for i in ids.tolist()) or "(none)"

    lines = [
        f"sample {sample.sample_id}: {counted(sample.num_steps, 'step')} ({_step_range(sample)}) = "
        f"{counted(sample.num_steps, 'forward pass', 'forward passes')}; output starts at canvas position "
        f"{sample.output_start} (positions below count from it); top-{sample.k} recorded",
        f"prompt: {tokens(sample.prompt_ids)}",
    ]
    length = sample.reference_length
    if length is not None:
        lines.append(f"target: {tokens(sample.target_ids[:length])}")
    if sample.text is not None:
        lines.append(f"output: {output_text(sample.text)}")
    result = result_summary(sample)
    if result is not None:
        lines.append(f"result: {result}")
    return lines


def _step_lines(view: StepView, color: bool) -> list[str]:
    wrong = "" if view.wrong is None else f", {view.wrong} wrong"
    changed = f", {view.changed} changed" if view.changed else ""
    changed += f", {view.taken_back} taken back" if view.taken_back else ""
    lines = [
        "",
        f"step {view.step} ({view.row + 1} of {view.num_steps}): {view.committed} committed{changed}, "
        f"{view.masks_remaining} masked{wrong}",
        "  " + " ".join(_cell(cell, color) for cell in view.cells),
    ]
    width = max((len(str(p.position)) for p in view.positions), default=1)
    for position in view.positions:
        alternatives = "  ".join(f"{t} {p:.3f}" for t, p in position.alternatives)
        if position.state == "masked":
            what = f"{MASK_GLYPH} masked"
        elif position.state == "changed":
            what = f"{position.token}{WRONG_MARK if position.wrong else ''} changed"
        elif position.state == "taken_back":
            what = f"{MASK_GLYPH} taken back (was {position.token})"
        else:
            confidence = "n/a" if math.isnan(position.confidence) else f"{position.confidence:.3f}"
            mark = WRONG_MARK if position.wrong else ""
            what = f"{position.token}{mark} committed, conf {confidence}"
        lines.append(f"  {position.position:>{width}} {what}" + (f": {alternatives}" if alternatives else ""))
    if view.hidden_masked:
        lines.append(f"  ... {counted(view.hidden_masked, 'more masked position')} (--positions to show more)")
    if view.unscored_masked:
        unscored = counted(view.unscored_masked, "masked position")
        lines.append(f"  ... {unscored} of later blocks, not scored at this step")
    return lines


def _cell(cell: Cell, color: bool) -> str:
    if cell.state == "masked":  # wrong only after the last step: never generated
        mark = WRONG_MARK if cell.wrong else ""
        return f"{_DIM}{MASK_GLYPH}{_RESET}{mark}" if color else f"{MASK_GLYPH}{mark}"
    text = cell.text + (WRONG_MARK if cell.wrong else "")
    if not color:
        return f"*{text}*" if cell.state == "committed" else f"~{text}~" if cell.state == "changed" else text
    if cell.state == "committed":
        return f"{_BOLD_RED if cell.wrong else _BOLD_GREEN}{text}{_RESET}"
    if cell.state == "changed":
        return f"{_YELLOW}{text}{_RESET}"
    return f"{_RED}{text}{_RESET}" if cell.wrong else text


def _step_range(sample: SampleHistory) -> str:
    """The sample's step numbers, each run of consecutive ones as ``first..last``: ``0..1, 3..5``
    where the sample sat out step 2 while others of its batch ran it (one step alone: ``0``)."""
    runs: list[tuple[int, int]] = []
    for step in sample.steps.tolist():
        if runs and step == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], step)
        else:
            runs.append((step, step))
    return ", ".join(str(first) if first == last else f"{first}..{last}" for first, last in runs) or "none"
