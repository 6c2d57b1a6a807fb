"""Step x position pictures of one sample's denoising, drawn with matplotlib (Agg canvas).

Rows are the steps the sample ran (first at the top); columns are the last few prompt tokens
(negative positions) then the output region (position 0 = first output token). Each cell shows
the token on the canvas after that step:

- committed at that step: coloured by the predictor's confidence at the commit, on a fixed
  0-1 scale (colour bar), so colours compare across samples and runs;
- committed at an earlier step: white; masked: dark grey, no text; prompt and other given
  tokens (never committed): light blue; changed at that step without a commit (a predictor
  that revises its canvas): orange; taken back at that step (masked again by a remasking
  predictor): purple, no text;
- differing from the target (where the file has one): a red frame at the commit, red text on
  the later rows.

:meth:`DenoisingFigure.render` draws the rows up to one step and blanks the later ones, so
the TensorBoard export writes one image per step and its step slider replays the denoising.
Token text is drawn only while cells are large enough to read it; larger grids shrink to fit
:data:`MAX_FIGURE_INCHES` and show colours only. Each distinct token text is rendered once and
copied into its cells (:class:`~xdllm.history.cell_labels.CellLabels`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from PIL import Image

from xdllm.history.cell_labels import CellLabel, CellLabels
from xdllm.history.image_summaries import encode_png
from xdllm.history.reader import SampleHistory
from xdllm.history.render import visible_token
from xdllm.temporary_files import write_bytes_atomically

CONFIDENCE_COLORMAP = "viridis"
MASKED_COLOR = "#4a4a4a"
EARLIER_COLOR = "#ffffff"
GIVEN_COLOR = "#cfe0f3"
NOT_YET_COLOR = "#ececec"
UNKNOWN_CONFIDENCE_COLOR = "#b0b0b0"
CHANGED_COLOR = "#f5a442"
TAKEN_BACK_COLOR = "#9b59b6"
WRONG_COLOR = "#d62728"
PROMPT_COLUMNS = 12
CELL_INCHES = (0.46, 0.28)
MIN_TEXT_CELL_INCHES = (0.3, 0.17)
MAX_FIGURE_INCHES = (20.0, 14.0)
MIN_AXES_INCHES = (6.0, 2.6)  # room for the labels, title and legend of short samples
MAX_TOKEN_CHARS = 6
MAX_TICKS = 40
DPI = 100
FONT_SIZE = 7


class DenoisingFigure:
    """The step x position figure of ``sample``; :meth:`render` draws it up to one step.

    ``token_text`` overrides the stored token strings; ``prompt_columns`` is how many of the
    last prompt tokens are shown (the axis label says when the prompt is longer).

    The figure is laid out and drawn in full once; each :meth:`render` restores that drawing
    and draws only what changes between steps on top (a cover over the later rows, the
    current-row frame, the prompt/output boundary and the title), so a picture per step costs
    little more than copying pixels.
    """

    def __init__(
        self,
        sample: SampleHistory,
        token_text: Callable[[int], str] | None = None,
        prompt_columns: int = PROMPT_COLUMNS,
    ) -> None:
        if sample.num_steps == 0:
            raise ValueError(f"sample {sample.sample_id} ran no steps: nothing to draw")
        self.sample = sample
        name = token_text or sample.token
        prompt = sample.prompt_ids[max(0, len(sample.prompt_ids) - prompt_columns):].tolist()
        self.prompt_shown = len(prompt)
        steps, region = sample.canvas.shape
        columns = self.prompt_shown + region
        self.colors = _cell_colors(sample, self.prompt_shown)
        width = min(CELL_INCHES[0], MAX_FIGURE_INCHES[0] / columns)
        height = min(CELL_INCHES[1], MAX_FIGURE_INCHES[1] / steps)
        self.figure = Figure(figsize=(max(columns * width, MIN_AXES_INCHES[0]) + 2.4,
                                      max(steps * height, MIN_AXES_INCHES[1]) + 2.6),
                             dpi=DPI, layout="constrained")
        self.canvas = FigureCanvasAgg(self.figure)
        self.axes = self.figure.add_subplot()
        self.image = self.axes.imshow(self.colors, aspect="auto", interpolation="nearest")
        self._draw_frame(steps, columns, len(sample.prompt_ids))
        self.cell_labels: CellLabels | None = None  # None: cells too small to label
        if width >= MIN_TEXT_CELL_INCHES[0] and height >= MIN_TEXT_CELL_INCHES[1]:
            self._draw_tokens(name, prompt)
        self._draw_wrong_frames()
        # above the tokens (zorder 3), in the order render() draws them
        self.cover = self.axes.add_patch(Rectangle((-0.5, -0.5), columns, 0, facecolor=NOT_YET_COLOR,
                                                   edgecolor="none", zorder=5))
        self.current = self.axes.add_patch(Rectangle((-0.5, -0.5), columns, 1, fill=False,
                                                     edgecolor="black", linewidth=1.6, zorder=7))
        self.titles = self._titles()
        self.title = self.axes.set_title(self.titles[-1], loc="left", fontsize=FONT_SIZE + 3)
        # one full draw lays the figure out (every picture has the same elements) and draws
        # all that does not change between steps (animated artists are laid out, not drawn);
        # render() draws the rest over a copy of it
        self._changing = [self.cover, *self.boundary, self.current, self.title]
        for artist in self._changing:
            artist.set_animated(True)
        self.canvas.draw()
        self.figure.set_layout_engine("none")
        self._background = self.canvas.copy_from_bbox(self.figure.bbox)

    @property
    def num_steps(self) -> int:
        return self.sample.num_steps

    def render(self, row: int) -> np.ndarray:
        """The picture showing steps ``0..row`` (a row index, not a step number) with the later
        rows blank, ``[H, W, 3]`` uint8."""
        return np.array(self.picture(row))

    def picture(self, row: int) -> Image.Image:
        """:meth:`render`'s picture as an RGB PIL image (a copy: later calls do not change it)."""
        if not 0 <= row < self.num_steps:
            raise IndexError(f"row {row} out of range: sample {self.sample.sample_id} ran "
                             f"{self.num_steps} steps")
        self.cover.set_y(row + 0.5)
        self.cover.set_height(self.num_steps - 1 - row)
        self.current.set_y(row - 0.5)
        self.title.set_text(self.titles[row])
        self.canvas.restore_region(self._background)
        for artist in self._changing:
            self.figure.draw_artist(artist)
        return Image.fromarray(np.asarray(self.canvas.buffer_rgba())).convert("RGB")  # [H, W, 4]: RGBA

    def _repr_png_(self) -> bytes:
        """A notebook shows the figure as its complete picture (every step drawn)."""
        return encode_png(self.picture(self.num_steps - 1))

    def save_png(self, path: Path, row: int | None = None) -> None:
        """Write the picture up to ``row`` (default: the last) to ``path`` (temporary file,
        then renamed)."""
        write_bytes_atomically(path, encode_png(self.picture(self.num_steps - 1 if row is None else row)))

    def _titles(self) -> list[str]:
        """The title of each row's picture (computed once: the sample's counts are tensors)."""
        sample = self.sample
        wrong = sample.wrong
        wrong_counts = wrong.sum(1).tolist() if wrong is not None else None
        titles = []
        for row, (step, committed, masked) in enumerate(zip(
                sample.steps.tolist(), sample.tokens_committed.tolist(), sample.masks_remaining.tolist())):
            title = (f"sample {sample.sample_id}: the canvas after step {step} ({row + 1} of "
                     f"{sample.num_steps} steps)\n{committed} committed at this step, {masked} still masked")
            if wrong_counts is not None:
                title += f", {wrong_counts[row]} wrong vs target"
            titles.append(title)
        return titles

    def _draw_frame(self, steps: int, columns: int, prompt_length: int) -> None:
        axes, sample, shown = self.axes, self.sample, self.prompt_shown
        xticks = _ticks(columns)
        axes.set_xticks(xticks, [str(column - shown) for column in xticks], fontsize=FONT_SIZE)
        yticks = _ticks(steps)
        axes.set_yticks(yticks, [str(int(sample.steps[row])) for row in yticks], fontsize=FONT_SIZE)
        prompt_note = (f"its last {shown} of {prompt_length} tokens" if shown < prompt_length
                       else f"{prompt_length} tokens")
        axes.set_xlabel(f"position relative to the output start (0 = first output token)\n"
                        f"negative positions: the prompt ({prompt_note})")
        axes.set_ylabel("denoising step")
        regions = axes.secondary_xaxis("top")
        centres, names = [shown + (columns - shown) / 2 - 0.5], ["output region"]
        self.boundary = [axes.axvline(shown - 0.5, color="black", linewidth=2, zorder=6)] if shown else []
        if shown:
            centres.insert(0, shown / 2 - 0.5)
            names.insert(0, "prompt")
        regions.set_xticks(centres, names, fontsize=FONT_SIZE + 2, fontweight="bold")
        regions.tick_params(length=0)
        colorbar = self.figure.colorbar(
            ScalarMappable(Normalize(0.0, 1.0), colormaps[CONFIDENCE_COLORMAP]), ax=axes,
            fraction=0.04, pad=0.01, aspect=30,
        )
        colorbar.set_label("confidence at commit\n(fixed scale, 0 to 1)")
        legend = [
            Patch(facecolor=MASKED_COLOR, label="masked"),
            Patch(facecolor=EARLIER_COLOR, edgecolor="#999999", label="committed at an earlier step"),
            Patch(facecolor=GIVEN_COLOR, label="prompt / given"),
            Patch(facecolor="none", edgecolor=WRONG_COLOR, linewidth=2,
                  label="wrong vs target (later: red text)"),
            Patch(facecolor=NOT_YET_COLOR, label="step not reached yet"),
        ]
        if bool(sample.rewritten.any()):
            legend.append(Patch(facecolor=CHANGED_COLOR, label="changed at this step, not committed"))
        if bool(sample.taken_back.any()):
            legend.append(Patch(facecolor=TAKEN_BACK_COLOR, label="taken back (masked again) at this step"))
        self.figure.legend(handles=legend, loc="outside lower center", ncols=3,
                           fontsize=FONT_SIZE + 1, frameon=False)

    def _draw_tokens(self, name: Callable[[int], str], prompt: list[int]) -> None:
        sample, shown = self.sample, self.prompt_shown
        canvas = sample.canvas.tolist()
        masked = sample.masked.tolist()
        wrong = sample.wrong.tolist() if sample.wrong is not None else None
        committed = sample.committed.tolist()
        texts: dict[int, str] = {}

        def text(token: int) -> str:
            if token not in texts:
                texts[token] = _short(visible_token(name(token)))
            return texts[token]

        labels = []
        for row in range(len(canvas)):
            labels += [CellLabel(column, row, text(token), "black") for column, token in enumerate(prompt)]
            for j, token in enumerate(canvas[row]):
                if masked[row][j]:
                    continue
                # a wrong commit has its red frame; red text would not read on dark colours
                red = wrong is not None and wrong[row][j] and not committed[row][j]
                color = WRONG_COLOR if red else _ink(self.colors[row, shown + j])
                labels.append(CellLabel(shown + j, row, text(token), color))
        self.cell_labels = self.axes.add_artist(CellLabels(labels, FONT_SIZE))

    def _draw_wrong_frames(self) -> None:
        wrong = self.sample.wrong
        if wrong is None:
            return
        for row, j in (wrong & self.sample.committed).nonzero().tolist():
            self.axes.add_patch(Rectangle((self.prompt_shown + j - 0.45, row - 0.45), 0.9, 0.9,
                                          fill=False, edgecolor=WRONG_COLOR, linewidth=1.8))


def _cell_colors(sample: SampleHistory, prompt_shown: int) -> np.ndarray:
    """RGBA ``[S, prompt_shown + R, 4]`` of every cell (see the module doc)."""
    steps, region = sample.canvas.shape
    colors = np.empty((steps, prompt_shown + region, 4))
    colors[:, :prompt_shown] = to_rgba(GIVEN_COLOR)
    output = colors[:, prompt_shown:]
    output[:] = to_rgba(EARLIER_COLOR)
    never_committed = (sample.commit_step < 0).numpy()
    output[:, never_committed] = to_rgba(GIVEN_COLOR)
    output[sample.masked.numpy()] = to_rgba(MASKED_COLOR)
    output[sample.rewritten.numpy()] = to_rgba(CHANGED_COLOR)
    output[sample.taken_back.numpy()] = to_rgba(TAKEN_BACK_COLOR)
    committed = sample.committed.numpy()
    confidence = sample.commit_confidence.numpy()
    known = committed & ~np.isnan(confidence)
    output[committed] = to_rgba(UNKNOWN_CONFIDENCE_COLOR)
    output[known] = colormaps[CONFIDENCE_COLORMAP](np.clip(confidence[known], 0.0, 1.0))
    return colors


def _ticks(count: int) -> list[int]:
    return list(range(0, count, max(1, math.ceil(count / MAX_TICKS))))


def _short(text: str) -> str:
    return text if len(text) <= MAX_TOKEN_CHARS else text[: MAX_TOKEN_CHARS - 1] + "…"


def _ink(rgba: np.ndarray) -> str:
    """Black or white text, whichever reads better on ``rgba``."""
    red, green, blue = rgba[:3]
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"
