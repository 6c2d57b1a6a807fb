"""A plain-text replay of one sample's denoising, for ``xdllm history show``.

Per step: the canvas with masks as ``_`` and the tokens committed at that step highlighted
(ANSI bold green with colour, ``*token*`` without), then one line per commit with its
confidence and top-k alternatives.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from xdllm.history.format import HistoryError
from xdllm.history.reader import SampleHistory
from xdllm.history.render import Cell, StepView, step_views, visible_token

_BOLD_GREEN = "\033[1;32m"
_DIM = "\033[2m"
_RESET = "\033[0m"


def format_replay(
    sample: SampleHistory,
    step: int | None = None,
    k: int | None = None,
    color: bool = False,
    token_text: Callable[[int], str] | None = None,
) -> str:
    """The replay of ``sample`` (only step number ``step`` when given) with ``k`` alternatives."""
    views = step_views(sample, k=k, token_text=token_text)
    if step is not None:
        views = [view for view in views if view.step == step]
        if not views:
            raise HistoryError(
                f"sample {sample.sample_id} has no step {step} (steps: {_step_range(sample)})"
            )
    name = token_text or sample.token
    lines = [_header(sample, name)]
    for view in views:
        lines += _step_lines(view, color)
    if sample.text is not None and step is None:
        lines.append(f"output: {sample.text}")
    return "\n".join(lines)


def _header(sample: SampleHistory, name: Callable[[int], str]) -> str:
    def tokens(ids) -> str:
        return " ".join(visible_token(name(i)) for i in ids.tolist()) or "(none)"

    lines = [
        f"sample {sample.sample_id}: {sample.num_steps} steps ({_step_range(sample)}), "
        f"output from canvas position {sample.output_start}, top-{sample.k} recorded",
        f"prompt: {tokens(sample.prompt_ids)}",
    ]
    if sample.target_ids is not None:
        lines.append(f"target: {tokens(sample.target_ids)}")
    return "\n".join(lines)


def _step_lines(view: StepView, color: bool) -> list[str]:
    lines = [
        "",
        f"step {view.step}: {len(view.commits)} committed, {view.masks_remaining} masks left",
        "  " + " ".join(_cell(cell, color) for cell in view.cells),
    ]
    for commit in view.commits:
        confidence = "n/a" if math.isnan(commit.confidence) else f"{commit.confidence:.3f}"
        alternatives = "  ".join(f"{t} {p:.3f}" for t, p in commit.alternatives)
        lines.append(f"  @{commit.position} {commit.token} (conf {confidence}): {alternatives}")
    return lines


def _cell(cell: Cell, color: bool) -> str:
    if cell.state == "masked":
        return f"{_DIM}_{_RESET}" if color else "_"
    if cell.state == "committed":
        return f"{_BOLD_GREEN}{cell.text}{_RESET}" if color else f"*{cell.text}*"
    return cell.text


def _step_range(sample: SampleHistory) -> str:
    if not sample.num_steps:
        return "none"
    return f"{int(sample.steps[0])}..{int(sample.steps[-1])}"
