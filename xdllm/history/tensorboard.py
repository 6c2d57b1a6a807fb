"""Render recorded histories into TensorBoard event files.

Tags start with ``<split>/sample_NNNNN/`` (the split the file records, e.g. ``validation`` or
``test``; ``generation`` when unknown, and the sample id), so validation and test samples never
share a card. Per sample:

- ``overview`` (Text): prompt, target, output with wrong tokens marked, how many target
  tokens are right, steps and forward passes;
- ``steps_SSS-EEE`` (Text, one card per group of steps, ascending; one entry each, so
  TensorBoard's newest-first order within a card never applies): per step the canvas (masks
  ``_``, tokens committed at the step in bold, tokens changed without a commit in italics,
  wrong tokens followed by ``✗``) and a table with a column per position committed, changed or
  taken back (``_ (was token)``) at the step or still masked (capped): the token, its confidence, and the top-k
  alternatives. Positions count from the output start;
- ``denoising`` (Images, one per step): the step x position picture of
  :mod:`xdllm.history.figures` showing the steps up to the image's step, so the step slider
  replays the denoising (at most ``max_frames`` images, evenly spaced, first and last always);
  the complete picture is also saved as ``<history file stem>.sample_NNNNN.png`` next to the
  history file;

and per split, over every sample of the files (not only the ``max_samples`` rendered):

- ``tokens_committed_per_step/{mean,std,min,max}`` (Scalars, x = step number): tokens committed
  at each step over the samples that ran it;
- ``tokens_changed_per_step/{mean,std,min,max}`` (Scalars, x = step number): tokens whose value
  changed at each step, written for splits whose predictor changes tokens it does not commit
  (uniform-noise revisions; under masked diffusion it would repeat the commits);
- ``tokens_taken_back_per_step/{mean,std,min,max}`` (Scalars, x = step number): tokens masked
  again at each step, written for splits whose predictor remasks;
- ``forward_passes_per_sample`` (Scalars, x = sample id): the steps each sample ran.

TensorBoard keeps only 10 images per tag unless started with e.g.
``--samples_per_plugin=images=1000`` (at least the number of pictures per sample; each text
card has a tag of its own).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from torch.utils.tensorboard import SummaryWriter

from xdllm.counted import counted
from xdllm.data.tokenizer import token_display
from xdllm.event_files import EVENT_FILE_PREFIX, event_writer
from xdllm.history.format import HistoryError
from xdllm.history.image_summaries import ImageSummaryQueue
from xdllm.history.reader import SampleHistory, load_history
from xdllm.history.render import (
    WRONG_MARK,
    Cell,
    PositionView,
    StepView,
    output_text,
    result_summary,
    step_views,
    visible_token,
)
from xdllm.history.statistics import DenoisingStatistics
from xdllm.history.storage import find_history_files
from xdllm.history.view_defaults import (
    DEFAULT_MASKED_POSITIONS,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_SAMPLES,
    DEFAULT_STEPS_PER_CARD,
)
from xdllm.interfaces import Tokenizer
from xdllm.temporary_files import write_bytes_atomically

if TYPE_CHECKING:  # drawing loads matplotlib: imported where a view is drawn
    from xdllm.history.figures import DenoisingFigure

MAX_STEP_CARDS = 16
UNKNOWN_SPLIT = "generation"
EVENT_FILE_SUFFIX = ".history"  # marks the event files of these views among a folder's others
NBSP = "\u00a0"  # keeps a token and its probability on one line
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~])")
_HTML_SPECIAL = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def sample_tag(sample: SampleHistory) -> str:
    """Tag prefix of a sample's entries: ``<split>/sample_NNNNN``."""
    return f"{sample.split or UNKNOWN_SPLIT}/sample_{sample.sample_id:05d}"


@dataclass(frozen=True)
class TensorboardReport:
    """What :func:`write_tensorboard` did: samples written, and each file it could not read
    (path and reason); the valid files are all written whatever the bad ones."""

    written: int
    bad_files: tuple[tuple[Path, str], ...] = ()
    counted: int = 0
    """Samples the statistics count: every sample of the files read."""


@dataclass(frozen=True)
class TextOptions:
    """How much the text cards show: ``steps_per_card`` steps per card (more when a sample
    would need over :data:`MAX_STEP_CARDS` cards) and the top-k of at most
    ``masked_positions`` still-masked positions per step (``None``: all)."""

    steps_per_card: int = DEFAULT_STEPS_PER_CARD
    masked_positions: int | None = DEFAULT_MASKED_POSITIONS


def remove_event_files(logdir: Path) -> int:
    """Delete the event files that :func:`write_tensorboard` wrote directly in ``logdir`` (named
    ``*`` :data:`EVENT_FILE_SUFFIX`; not in subfolders, not another writer's, such as the
    training run's metrics), so that writing the views again replaces them instead of adding a
    second copy that TensorBoard would merge with the first; returns how many were deleted."""
    if not logdir.is_dir():
        return 0
    files = [path for path in logdir.glob(f"{EVENT_FILE_PREFIX}*{EVENT_FILE_SUFFIX}") if path.is_file()]
    for path in files:
        path.unlink()
    return len(files)


def write_tensorboard(
    history_paths: str | Path | Iterable[str | Path],
    logdir: str | Path,
    max_samples: int | None = DEFAULT_MAX_SAMPLES,
    tokenizer: Tokenizer | None = None,
    max_frames: int = DEFAULT_MAX_FRAMES,
    text: TextOptions = TextOptions(),
    grid: tuple[int, int] | None = None,
) -> TensorboardReport:
    """Write TensorBoard views of up to ``max_samples`` samples, file by file, and the scalar
    statistics of every sample.

    ``history_paths``: history files, history directories or run directories (``<run>/history``).
    ``tokenizer`` overrides the token strings stored in the files. ``max_frames`` bounds the
    denoising pictures per sample. A file that cannot be read (truncated, garbled, wrong
    schema) is skipped and reported; every valid one is written. ``grid`` (rows, cols): also
    draw each output region as a grid (:class:`~xdllm.history.grid.GridFigure`, tag
    ``<sample>/grid``, PNG beside the history file), e.g. ``(9, 9)`` for sudoku.
    """
    if grid is not None and (len(grid) != 2 or min(grid) < 1):
        raise HistoryError(f"grid must be (rows, cols) with both >= 1, got {grid!r}")
    if max_frames < 1:
        raise HistoryError(f"max_frames must be >= 1, got {max_frames}")
    if text.steps_per_card < 1:
        raise HistoryError(f"steps_per_card must be >= 1, got {text.steps_per_card}")
    paths = [history_paths] if isinstance(history_paths, (str, Path)) else list(history_paths)
    token_text = token_display(tokenizer) if tokenizer is not None else None
    written, counted, bad = 0, 0, []
    statistics = DenoisingStatistics()
    with (event_writer(logdir, filename_suffix=EVENT_FILE_SUFFIX) as writer,
          ImageSummaryQueue(writer) as pictures):
        for file_path in (f for path in paths for f in find_history_files(path)):
            try:
                history = load_history(file_path)
            except HistoryError as error:
                bad.append((file_path, str(error)))
                continue
            statistics.add(history, history.split or UNKNOWN_SPLIT)
            counted += len(history)
            remaining = None if max_samples is None else max(max_samples - written, 0)
            for sample in (history.sample(i) for i in range(len(history))[:remaining]):
                _write_sample(writer, pictures, sample, token_text, max_frames, text, png_path(file_path, sample))
                if grid is not None and sample.num_steps:
                    _write_grid(writer, sample, token_text, grid, file_path)
                written += 1
        _write_statistics(writer, statistics)
    return TensorboardReport(written, tuple(bad), counted)


def _write_statistics(writer: SummaryWriter, statistics: DenoisingStatistics) -> None:
    for split, numbers in statistics.splits.items():
        per_step = {"tokens_committed_per_step": numbers.committed}
        if numbers.rewrites:
            per_step["tokens_changed_per_step"] = numbers.changed
        if numbers.remasks:
            per_step["tokens_taken_back_per_step"] = numbers.taken_back
        for tag, counts_by_step in per_step.items():
            for step, counts in sorted(counts_by_step.items()):
                values = {"mean": counts.mean, "std": counts.std, "min": counts.low, "max": counts.high}
                for name, value in values.items():
                    writer.add_scalar(f"{split}/{tag}/{name}", value, global_step=step)
        for sample_id, passes in sorted(numbers.forward_passes.items()):
            writer.add_scalar(f"{split}/forward_passes_per_sample", passes, global_step=sample_id)


def _write_grid(writer: SummaryWriter, sample: SampleHistory, token_text, grid: tuple[int, int],
                history_file: Path) -> None:
    try:
        from xdllm.history.grid import GridFigure  # matplotlib: loaded when a view is drawn

        figure = GridFigure(sample, grid, token_text)
    except ValueError as error:
        raise HistoryError(f"{history_file}: {error}") from error
    figure.save_png(png_path(history_file, sample).with_suffix(".grid.png"))
    writer.add_figure(f"{sample_tag(sample)}/grid", figure.figure, global_step=0, close=True)


def png_path(history_file: Path, sample: SampleHistory) -> Path:
    """Where the complete denoising picture of ``sample`` is saved: next to its history file."""
    return history_file.with_name(f"{history_file.stem}.sample_{sample.sample_id:05d}.png")


def frame_rows(num_steps: int, max_frames: int) -> list[int]:
    """Rows drawn as pictures: all of them when they fit in ``max_frames``, else evenly spaced
    rows including the first and the last."""
    if num_steps <= max_frames:
        return list(range(num_steps))
    if max_frames == 1:
        return [num_steps - 1]
    return sorted({round(i * (num_steps - 1) / (max_frames - 1)) for i in range(max_frames)})


def step_cards(views: list[StepView], steps_per_card: int) -> list[list[StepView]]:
    """Consecutive groups of ``steps_per_card`` steps, at most :data:`MAX_STEP_CARDS` groups
    (larger groups for long samples)."""
    size = max(steps_per_card, math.ceil(len(views) / MAX_STEP_CARDS))
    return [views[start:start + size] for start in range(0, len(views), size)]


def _write_sample(writer: SummaryWriter, pictures: ImageSummaryQueue, sample: SampleHistory, token_text,
                  max_frames: int, text: TextOptions, png: Path) -> None:
    tag = sample_tag(sample)
    name = token_text or sample.token
    writer.add_text(f"{tag}/overview", overview_markdown(sample, name, text.masked_positions), global_step=0)
    views = step_views(sample, token_text=token_text, masked_positions=text.masked_positions)
    width = len(str(views[-1].step)) if views else 1
    for card in step_cards(views, text.steps_per_card):
        first, last = card[0].step, card[-1].step
        writer.add_text(f"{tag}/steps_{first:0{width}d}-{last:0{width}d}",
                        "\n\n".join(step_markdown(view) for view in card), global_step=first)
    if sample.num_steps:
        from xdllm.history.figures import DenoisingFigure  # matplotlib: loaded when a view is drawn

        _write_pictures(pictures, f"{tag}/denoising", DenoisingFigure(sample, token_text), max_frames, png)


def _write_pictures(pictures: ImageSummaryQueue, tag: str, figure: DenoisingFigure, max_frames: int,
                    png: Path) -> None:
    """One picture per drawn row, at the row's step number; the complete one (the last row,
    always drawn) also as a PNG file.

    The pictures are matplotlib renderings of one figure (what ``add_figure`` would log),
    handed over as pixels: ``add_figure`` redraws the whole figure for every step, while
    :meth:`DenoisingFigure.picture` redraws only what changes; they are encoded on worker
    threads while the next one is drawn."""
    for row in frame_rows(figure.num_steps, max_frames):
        encoded = pictures.add(tag, figure.picture(row), global_step=int(figure.sample.steps[row]))
    write_bytes_atomically(png, encoded.result())


def escape_markdown(text: str) -> str:
    """Backslash-escape characters Markdown would interpret; ``& < >`` become HTML entities
    (TensorBoard's Markdown shows ``\\<`` literally, so ``<eos>`` needs ``&lt;eos&gt;``)."""
    escaped = "".join(_HTML_SPECIAL.get(char, char) for char in text)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", escaped)


def cell_markdown(cell: Cell) -> str:
    """A canvas cell: ``\\_`` when masked, bold when committed at the step, italic when changed
    without a commit, ``✗`` when wrong."""
    if cell.state == "masked":  # wrong only after the last step: never generated
        return "\\_" + (WRONG_MARK if cell.wrong else "")
    text = escape_markdown(cell.text) + (WRONG_MARK if cell.wrong else "")
    return f"**{text}**" if cell.state == "committed" else f"*{text}*" if cell.state == "changed" else text


def step_markdown(view: StepView) -> str:
    """Markdown of one step: a header line, the canvas line, then a table with one column per
    position committed at the step or still masked (capped; the number left out is said): the
    token (with its confidence when committed), and below it the top-k alternatives, one per
    line of a single cell (rows of TensorBoard's tables are tall)."""
    wrong = "" if view.wrong is None else f" · {view.wrong} wrong"
    changed = f" · {view.changed} changed" if view.changed else ""
    changed += f" · {view.taken_back} taken back" if view.taken_back else ""
    lines = [
        f"**step {view.step}** ({view.row + 1} of {view.num_steps}) · {view.committed} committed{changed} · "
        f"{view.masks_remaining} masked{wrong}<br>" + " ".join(cell_markdown(cell) for cell in view.cells),
    ]
    if view.positions:
        columns = view.positions
        lines += [
            "",
            "| pos | " + " | ".join(str(p.position) for p in columns) + " |",
            "|---|" + "---|" * len(columns),
            "| **token** | " + " | ".join(_token_markdown(p) for p in columns) + " |",
        ]
        lines.append("| **top-k** | " + " | ".join(
            "<br>".join(f"{escape_markdown(token)}{NBSP}{_probability(probability)}"
                        for token, probability in p.alternatives)
            for p in columns
        ) + " |")
    if view.hidden_masked:
        shown = view.masks_remaining - view.unscored_masked - view.hidden_masked
        lines += ["", f"*... and {counted(view.hidden_masked, 'more masked position')} not shown "
                      f"(top-k of the first {shown} only)*"]
    if view.unscored_masked:
        lines += ["", f"*{counted(view.unscored_masked, 'masked position')} of later blocks, not scored at "
                      "this step*"]
    return "\n".join(lines)


def _token_markdown(position: PositionView) -> str:
    if position.state == "masked":
        return "\\_"
    if position.state == "taken_back":
        return f"\\_ (was {escape_markdown(position.token)})"
    mark = WRONG_MARK if position.wrong else ""
    if position.state == "changed":
        return f"*{escape_markdown(position.token)}*{mark}"
    confidence = "n/a" if math.isnan(position.confidence) else _probability(position.confidence)
    return f"**{escape_markdown(position.token)}**{mark}{NBSP}{confidence}"


def _probability(value: float) -> str:
    """Two decimals without the leading zero (``.62``), to keep table columns narrow."""
    text = f"{value:.2f}"
    return text[1:] if text.startswith("0.") else text


def overview_markdown(sample: SampleHistory, name: Callable[[int], str],
                      masked_positions: int | None = DEFAULT_MASKED_POSITIONS) -> str:
    """Markdown of a sample's overview card: what went in, what came out, how right it is."""
    def tokens(ids, wrong=None) -> str:
        marks = wrong if wrong is not None else [False] * len(ids)
        return " ".join(escape_markdown(visible_token(name(i))) + (WRONG_MARK if bad else "")
                        for i, bad in zip(ids.tolist(), marks)) or "(none)"

    region = sample.canvas.shape[1]
    lines = [
        f"**sample {sample.sample_id}** ({sample.split or UNKNOWN_SPLIT}) · {sample.num_steps} steps = "
        f"{sample.num_steps} forward passes · {region} output positions · top-{sample.k} recorded",
        "",
        "| | tokens |",
        "|---|---|",
        f"| **prompt** | {tokens(sample.prompt_ids)} |",
    ]
    length = sample.reference_length
    if length is not None:
        lines.append(f"| **target** | {tokens(sample.target_ids[:length])} |")
    if sample.num_steps:
        wrong = sample.wrong[-1].tolist() if length is not None else None
        lines.append(f"| **output** | {tokens(sample.canvas[-1], wrong)} |")
    result = result_summary(sample)
    if result is not None:
        lines += ["", f"**result:** {result}"]
    if sample.text is not None:
        lines += ["", f"**decoded output:** {escape_markdown(output_text(sample.text))}"]
    cap = "every" if masked_positions is None else f"the first {masked_positions}"
    taken_back = (" A token taken back (masked again by the remasking predictor) shows as \\_ (was "
                  "token) in its step's table." if bool(sample.taken_back.any()) else "")
    lines += ["", f"*The steps cards show, step by step, the canvas (masked \\_, committed at the step "
                  f"in bold, wrong {WRONG_MARK}) and the top-k of the positions committed at the step "
                  f"and of {cap} still masked; positions count from the output start (0 = first "
                  f"output token).{taken_back}*"]
    return "\n".join(lines)

