"""CellLabels: each distinct text rendered once and copied into its cells, as Text would draw it."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from xdllm.history.cell_labels import SLOTS_PER_COLUMN, CellLabel, CellLabels, render_stamps

COLUMNS, ROWS = 5, 4
TEXTS = [("w12", "black"), ("the", "#d62728"), ("é…", "black"), ("<eos>", "#1f77b4"), ("9", "black")]


def _labels() -> list[CellLabel]:
    return [CellLabel(column, row, *TEXTS[(column + row) % len(TEXTS)])
            for row in range(ROWS) for column in range(COLUMNS)]


def _draw(labels: list[CellLabel], stamped: bool, fontsize: int = 7) -> tuple[np.ndarray, object]:
    """A white grid of cells with ``labels``: as CellLabels, or as one Text per cell."""
    figure = Figure(figsize=(4, 2.5), dpi=100)
    canvas = FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.imshow(np.ones((ROWS, COLUMNS, 3)), aspect="auto", interpolation="nearest")
    axes.set_xticks([])
    axes.set_yticks([])  # nothing drawn outside the axes but what overflows them
    if stamped:
        axes.add_artist(CellLabels(labels, fontsize))
    else:
        for label in labels:
            axes.text(label.column, label.row, label.text, ha="center", va="center", fontsize=fontsize,
                      color=label.color, parse_math=False, clip_on=True)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].astype(float), axes


def _ink_in_cell(pixels: np.ndarray, axes, column: int, row: int) -> tuple[float, np.ndarray, np.ndarray]:
    """Ink (darkness against white) in the cell: its total, its centroid (x, y in pixels) and
    the colour of its darkest pixel."""
    height = pixels.shape[0]
    (x0, y0), (x1, y1) = axes.transData.transform([(column - 0.5, row + 0.5), (column + 0.5, row - 0.5)])
    box = pixels[height - int(y1) + 1:height - int(y0) - 1, int(x0) + 1:int(x1) - 1]
    ink = (255 - box).sum(axis=2)
    ys, xs = np.mgrid[:ink.shape[0], :ink.shape[1]]
    centroid = np.array([(ink * xs).sum(), (ink * ys).sum()]) / ink.sum()
    darkest = box.reshape(-1, 3)[ink.argmax()]
    return ink.sum(), centroid, darkest


def test_labels_draw_the_glyphs_text_would_draw_where_it_would_draw_them():
    labels = _labels()
    stamped, axes = _draw(labels, stamped=True)
    plain, _ = _draw(labels, stamped=False)
    assert not np.array_equal(stamped, np.full_like(stamped, 255))
    for label in labels:
        ink, centre, darkest = _ink_in_cell(stamped, axes, label.column, label.row)
        expected_ink, expected_centre, expected_darkest = _ink_in_cell(plain, axes, label.column, label.row)
        assert ink == pytest.approx(expected_ink, rel=0.06), label
        assert np.abs(centre - expected_centre).max() <= 0.75, (label, centre, expected_centre)
        assert np.abs(darkest - expected_darkest).max() <= 40, (label, darkest, expected_darkest)


def test_labels_are_clipped_to_the_axes():
    wide = [CellLabel(0, 0, "WWWWWW", "black"), CellLabel(COLUMNS - 1, ROWS - 1, "WWWWWW", "black")]
    pixels, axes = _draw(wide, stamped=True, fontsize=20)  # wider than a cell: past the axes' edges
    height = pixels.shape[0]
    x0, y0, x1, y1 = axes.bbox.extents
    outside = np.ones(pixels.shape[:2], dtype=bool)
    outside[height - int(y1) - 2:height - int(y0) + 2, int(x0) - 2:int(x1) + 2] = False  # the frame too
    assert (pixels[outside] == 255).all()
    plain, _ = _draw(wide, stamped=False, fontsize=20)
    assert (plain[outside] == 255).all()  # as Text(clip_on=True) is clipped


def test_every_distinct_text_gets_its_stamp_and_blank_texts_none():
    keys = [(f"t{i}", "black") for i in range(2 * SLOTS_PER_COLUMN + 3)] + [(" ", "black"), ("", "red")]
    stamps = render_stamps(keys, fontsize=7, dpi=100)
    assert stamps[(" ", "black")] is None and stamps[("", "red")] is None
    drawn = [stamps[key] for key in keys[:-2]]
    assert all(stamp is not None and stamp.pixels[..., 3].any() for stamp in drawn)
    assert len({stamp.pixels.tobytes() for stamp in drawn}) == len(drawn)  # no slot cut from a neighbour


def test_vector_output_keeps_the_labels_as_text(tmp_path):
    import matplotlib

    figure = Figure(figsize=(4, 2.5))
    axes = figure.add_subplot()
    axes.imshow(np.ones((ROWS, COLUMNS, 3)), aspect="auto", interpolation="nearest")
    axes.add_artist(CellLabels(_labels(), 7))
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as <text>, not glyph paths
        figure.savefig(tmp_path / "cells.svg")
    svg = (tmp_path / "cells.svg").read_text()
    for text, _ in TEXTS:
        assert svg.count(f">{text.replace('<', '&lt;').replace('>', '&gt;')}<") == ROWS * COLUMNS // len(TEXTS), text
    assert svg.count("<image") == 1  # the cells' colours (imshow); no label drawn as pixels
