"""Short texts centred in the cells of an image grid, each distinct text rendered once.

A denoising picture shows a token in most of its cells: about 1,300 texts for 36 steps of 36
tokens, at about 0.8 ms each as matplotlib ``Text`` artists, most of the time a figure takes.
The same token repeats down its column on every later step, so :class:`CellLabels` renders each
distinct (text, colour) once, as ``Text`` on a scratch canvas, and copies those pixels into
every cell that shows it (``renderer.draw_image``: alpha-blended, clipped to the axes): the
same glyphs, at most half a pixel from where a ``Text`` per cell would put them. Saved as vector
graphics (PDF, SVG), the labels are drawn as ``Text``, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import IdentityTransform

TEXT_ZORDER = 3  # where Axes.text draws
SLOTS_PER_COLUMN = 64  # of the scratch canvas (Agg canvases stop at 2**16 pixels a side)


@dataclass(frozen=True)
class CellLabel:
    """``text`` in ``color``, centred on the data point (``column``, ``row``)."""

    column: int
    row: int
    text: str
    color: str


@dataclass(frozen=True)
class Stamp:
    """The pixels of one rendered text (``[H, W, 4]`` RGBA, bottom row first, as
    ``draw_image`` takes them) and where its bottom-left corner lies relative to the text's
    centre, in pixels."""

    pixels: np.ndarray
    left: int
    bottom: int


def render_stamps(keys: list[tuple[str, str]], fontsize: float | int,
                  dpi: float | int) -> dict[tuple[str, str], Stamp | None]:
    """Each (text, colour) drawn once, centred, on one transparent scratch canvas, then cut out
    (``None`` for a text with no visible pixel, e.g. a space)."""
    if not keys:
        return {}
    em = fontsize * dpi / 72
    slot_width = 2 * math.ceil(em * (2 + max(len(text) for text, _ in keys)))
    slot_height = 2 * math.ceil(1.5 * em)
    grid_columns = math.ceil(len(keys) / SLOTS_PER_COLUMN)
    grid_rows = min(len(keys), SLOTS_PER_COLUMN)
    scratch = Figure(figsize=(grid_columns * slot_width / dpi, grid_rows * slot_height / dpi), dpi=dpi,
                     facecolor="none")
    canvas = FigureCanvasAgg(scratch)
    corners = [((index // SLOTS_PER_COLUMN) * slot_width, (index % SLOTS_PER_COLUMN) * slot_height)
               for index in range(len(keys))]  # each slot's top-left pixel
    for (text, color), (x, y) in zip(keys, corners):
        scratch.text(x + slot_width / 2, grid_rows * slot_height - (y + slot_height / 2), text, ha="center",
                     va="center", fontsize=fontsize, color=color, parse_math=False, transform=IdentityTransform())
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())
    stamps: dict[tuple[str, str], Stamp | None] = {}
    for key, (x, y) in zip(keys, corners):
        slot = pixels[y:y + slot_height, x:x + slot_width]
        rows, columns = np.nonzero(slot[..., 3])
        if len(rows) == 0:
            stamps[key] = None
            continue
        top, bottom, left, right = rows.min(), rows.max() + 1, columns.min(), columns.max() + 1
        stamps[key] = Stamp(np.ascontiguousarray(slot[top:bottom, left:right][::-1]), left=int(left) - slot_width // 2,
                            bottom=slot_height // 2 - int(bottom))
    return stamps


class CellLabels(Artist):
    """The ``labels`` of an axes' cells, drawn at text depth and clipped to the axes like
    ``Axes.text(..., clip_on=True)``; add it with ``axes.add_artist``."""

    def __init__(self, labels: list[CellLabel], fontsize: float | int) -> None:
        super().__init__()
        self.labels = labels
        self.fontsize = fontsize
        self.set_zorder(TEXT_ZORDER)
        self._stamps: dict[float, dict[tuple[str, str], Stamp | None]] = {}
        self._text_artists: list[Text] | None = None

    def draw(self, renderer) -> None:  # RendererAgg, or a vector backend's (not all are RendererBase)
        if not self.get_visible() or not self.labels:
            return
        if not isinstance(renderer, RendererAgg):  # vector output (PDF, SVG): text stays text
            for text in self._texts():
                text.draw(renderer)
            return
        dpi = renderer.points_to_pixels(72.0)
        if dpi not in self._stamps:
            keys = list(dict.fromkeys((label.text, label.color) for label in self.labels))
            self._stamps[dpi] = render_stamps(keys, self.fontsize, dpi)
        stamps = self._stamps[dpi]
        centres = np.rint(self.axes.transData.transform([(label.column, label.row) for label in self.labels]))
        gc = renderer.new_gc()
        gc.set_clip_rectangle(self.axes.bbox)
        for label, (x, y) in zip(self.labels, centres.astype(int).tolist()):
            stamp = stamps[(label.text, label.color)]
            if stamp is not None:
                renderer.draw_image(gc, x + stamp.left, y + stamp.bottom, stamp.pixels)
        gc.restore()
        self.stale = False

    def _texts(self) -> list[Text]:
        """A ``Text`` per label, as ``Axes.text(..., clip_on=True)`` makes it (built once)."""
        if self._text_artists is None:
            self._text_artists = []
            for label in self.labels:
                text = Text(label.column, label.row, label.text, ha="center", va="center", fontsize=self.fontsize,
                            color=label.color, parse_math=False, clip_on=True)
                text.set_figure(self.figure)
                text.set_transform(self.axes.transData)
                text.set_clip_path(self.axes.patch)
                self._text_artists.append(text)
        return self._text_artists
