"""Render recorded histories into TensorBoard event files.

Per sample (tags start with ``sample_NNNNN/``, the sample id):

- ``steps`` (Text, one entry per step): the canvas after the step with masks as ``_`` and the
  tokens committed at that step in bold, then a table of those commits with their confidence
  and top-k alternatives;
- ``summary`` (Text): prompt, target and final output;
- ``denoising`` (Images, one per step): the step x position picture of
  :mod:`xdllm.history.figures` showing the steps up to the image's step, so the step slider
  replays the denoising (at most ``max_frames`` images, evenly spaced, first and last always);
  the complete picture is also saved as ``<history file stem>.sample_NNNNN.png`` next to the
  history file;
- ``masks_remaining`` (Scalars): masked output positions after each step.

TensorBoard keeps only 10 text entries per tag (a random sample of the steps) unless started
with e.g. ``--samples_per_plugin=text=1000`` (at least the number of steps; in TensorBoard 2.21
``text=0`` shows nothing rather than everything).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

from xdllm.history.figures import DenoisingFigure
from xdllm.history.format import HistoryError
from xdllm.history.reader import SampleHistory, iter_samples
from xdllm.history.render import StepView, step_views, visible_token
from xdllm.history.storage import find_history_files
from xdllm.interfaces import Tokenizer

DEFAULT_MAX_SAMPLES = 16
DEFAULT_MAX_FRAMES = 32
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~])")
_HTML_SPECIAL = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def sample_tag(sample: SampleHistory) -> str:
    """Tag prefix of a sample's entries."""
    return f"sample_{sample.sample_id:05d}"


@dataclass(frozen=True)
class TensorboardReport:
    """What :func:`write_tensorboard` did: samples written, and each file it could not read
    (path and reason); the valid files are all written whatever the bad ones."""

    written: int
    bad_files: tuple[tuple[Path, str], ...] = ()


def write_tensorboard(
    history_paths: str | Path | Iterable[str | Path],
    logdir: str | Path,
    max_samples: int | None = DEFAULT_MAX_SAMPLES,
    tokenizer: Tokenizer | None = None,
    max_frames: int = DEFAULT_MAX_FRAMES,
) -> TensorboardReport:
    """Write TensorBoard views of up to ``max_samples`` samples, file by file.

    ``history_paths``: history files, history directories or run directories (``<run>/history``).
    ``tokenizer`` overrides the token strings stored in the files. ``max_frames`` bounds the
    denoising pictures per sample. A file that cannot be read (truncated, garbled, wrong
    schema) is skipped and reported; every valid one is written.
    """
    if max_frames < 1:
        raise HistoryError(f"max_frames must be >= 1, got {max_frames}")
    paths = [history_paths] if isinstance(history_paths, (str, Path)) else list(history_paths)
    token_text = tokenizer.id_to_token if tokenizer is not None else None
    written, bad = 0, []
    with SummaryWriter(log_dir=str(logdir)) as writer:
        for file_path in (f for path in paths for f in find_history_files(path)):
            remaining = None if max_samples is None else max_samples - written
            if remaining is not None and remaining <= 0:
                break
            try:
                samples = list(iter_samples(file_path, max_samples=remaining))
            except HistoryError as error:
                bad.append((file_path, str(error)))
                continue
            for sample in samples:
                _write_sample(writer, sample, token_text, max_frames, png_path(file_path, sample))
                written += 1
    return TensorboardReport(written, tuple(bad))


def png_path(history_file: Path, sample: SampleHistory) -> Path:
    """Where the complete denoising picture of ``sample`` is saved: next to its history file."""
    return history_file.with_name(f"{history_file.stem}.{sample_tag(sample)}.png")


def frame_rows(num_steps: int, max_frames: int) -> list[int]:
    """Rows drawn as pictures: all of them when they fit in ``max_frames``, else evenly spaced
    rows including the first and the last."""
    if num_steps <= max_frames:
        return list(range(num_steps))
    if max_frames == 1:
        return [num_steps - 1]
    return sorted({round(i * (num_steps - 1) / (max_frames - 1)) for i in range(max_frames)})


def _write_sample(writer: SummaryWriter, sample: SampleHistory, token_text, max_frames: int,
                  png: Path) -> None:
    tag = sample_tag(sample)
    name = token_text or sample.token
    writer.add_text(f"{tag}/summary", _summary_markdown(sample, name), global_step=0)
    for view in step_views(sample, token_text=token_text):
        writer.add_text(f"{tag}/steps", step_markdown(view), global_step=view.step)
        writer.add_scalar(f"{tag}/masks_remaining", view.masks_remaining, global_step=view.step)
    if sample.num_steps:
        _write_pictures(writer, f"{tag}/denoising", DenoisingFigure(sample, token_text), max_frames, png)


def _write_pictures(writer: SummaryWriter, tag: str, figure: DenoisingFigure, max_frames: int,
                    png: Path) -> None:
    """One picture per drawn row, at the row's step number; the complete one also as PNG."""
    for row in frame_rows(figure.num_steps, max_frames):
        figure.show_through(row)
        writer.add_figure(tag, figure.figure, global_step=int(figure.sample.steps[row]), close=False)
    figure.show_through(figure.num_steps - 1)
    figure.save_png(png)


def escape_markdown(text: str) -> str:
    """Backslash-escape characters Markdown would interpret; ``& < >`` become HTML entities
    (TensorBoard's Markdown shows ``\\<`` literally, so ``<eos>`` needs ``&lt;eos&gt;``)."""
    escaped = "".join(_HTML_SPECIAL.get(char, char) for char in text)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", escaped)


def step_markdown(view: StepView) -> str:
    """Markdown of one step: canvas line, then one table row per committed position."""
    canvas = " ".join(
        "\\_" if cell.state == "masked"
        else f"**{escape_markdown(cell.text)}**" if cell.state == "committed"
        else escape_markdown(cell.text)
        for cell in view.cells
    )
    lines = [
        f"**step {view.step}**: {len(view.commits)} committed, "
        f"{view.masks_remaining} masks left",
        "",
        canvas,
    ]
    if view.commits:
        lines += ["", "| position | token | confidence | top-k (probability) |", "|---|---|---|---|"]
        lines += [
            f"| {c.position} | {escape_markdown(c.token)} | {_number(c.confidence)} | "
            + " · ".join(f"{escape_markdown(t)} {p:.3f}" for t, p in c.alternatives)
            + " |"
            for c in view.commits
        ]
    return "\n".join(lines)


def _summary_markdown(sample: SampleHistory, name) -> str:
    def tokens(ids) -> str:
        return " ".join(escape_markdown(visible_token(name(i))) for i in ids.tolist())

    lines = [
        f"**sample {sample.sample_id}**: {sample.num_steps} steps, output from canvas position "
        f"{sample.output_start}, top-{sample.k} recorded",
        "",
        f"**prompt:** {tokens(sample.prompt_ids) or '(none)'}",
    ]
    if sample.target_ids is not None:
        lines += ["", f"**target:** {tokens(sample.target_ids)}"]
    if sample.text is not None:
        lines += ["", f"**output:** {escape_markdown(sample.text)}"]
    return "\n".join(lines)


def _number(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f}"
