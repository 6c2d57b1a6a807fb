"""Grid pictures of a denoising whose output is a grid, such as a 9x9 sudoku.

Two panels over the ``rows x cols`` grid of the output region (row-major, the first
``rows * cols`` output positions), each cell showing the final token:

- **fill order**: the cell's colour is the order in which it was committed (1 = first, on a
  fixed 1..cells scale), its number printed in the corner; cells given in the prompt (a prompt
  grid of the same size whose token is not the blank symbol) are framed in blue;
- **confidence at commit**: the predictor's confidence when the cell was committed, on an
  absolute 0-1 scale.

Tokens that differ from the target are red. Committing several cells at one step gives them the
same order number. This is where an unmasking order is the point: margin-ordered decoding of a
sudoku fills the forced cells first, random order does not.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from xdllm.history.figures import CONFIDENCE_COLORMAP, UNKNOWN_CONFIDENCE_COLOR, WRONG_COLOR
from xdllm.history.reader import SampleHistory
from xdllm.temporary_files import written_atomically

ORDER_COLORMAP = "plasma"
GIVEN_EDGE_COLOR = "#1f5fbf"
CELL_INCHES = 0.42


def fill_order(sample: SampleHistory, cells: int) -> np.ndarray:
    """1-based rank of each of the first ``cells`` positions' commit steps (positions committed
    at the same step share a rank); 0 where never committed."""
    commit = sample.commit_step[:cells]
    done = commit >= 0
    ranks = np.zeros(cells, dtype=np.int64)
    if bool(done.any()):
        order = torch.unique(commit[done], sorted=True)
        ranks[done.numpy()] = (torch.searchsorted(order, commit[done]) + 1).numpy()
    return ranks


class GridFigure:
    """The two-panel grid picture of ``sample``'s output region read as ``shape`` (rows, cols):
    its first ``rows * cols`` positions, the title saying so when the region is longer.

    ``blank``: the prompt symbol of an empty cell (``"0"`` for sudoku); when the prompt holds at
    least ``rows * cols`` tokens, its last ``rows * cols`` are read as the prompt grid and cells
    whose token is another symbol are marked as given.
    """

    def __init__(self, sample: SampleHistory, shape: tuple[int, int],
                 token_text: Callable[[int], str] | None = None, blank: str = "0") -> None:
        rows, cols = shape
        cells = rows * cols
        region = int(sample.canvas.shape[1])
        if rows < 1 or cols < 1 or region < cells:
            raise ValueError(f"sample {sample.sample_id}: an output region of {region} positions "
                             f"cannot be read as a {rows}x{cols} grid")
        if sample.num_steps == 0:
            raise ValueError(f"sample {sample.sample_id} ran no steps: nothing to draw")
        name = token_text or sample.token
        final = sample.canvas[-1, :cells].tolist()
        prompt = [name(t) for t in sample.prompt_ids.tolist()]
        # the prompt grid is its last rows * cols tokens (a family may put bos before it)
        given = [symbol != blank for symbol in prompt[-cells:]] if len(prompt) >= cells else [False] * cells
        wrong = sample.wrong
        wrong_cells = wrong[-1, :cells].tolist() if wrong is not None else [False] * cells
        order = fill_order(sample, cells)
        confidence = sample.confidence_at_commit[:cells].numpy()

        self.sample = sample
        self.figure = Figure(figsize=(2 * cols * CELL_INCHES + 2.4, rows * CELL_INCHES + 1.2),
                             dpi=100, layout="constrained")
        FigureCanvasAgg(self.figure)
        order_axes, confidence_axes = self.figure.subplots(1, 2)
        order_norm = Normalize(vmin=1, vmax=max(cells, 2))
        order_colors = colormaps[ORDER_COLORMAP](order_norm(order.reshape(rows, cols)))
        order_colors[order.reshape(rows, cols) == 0] = (0.85, 0.85, 0.85, 1.0)
        confidence_colors = colormaps[CONFIDENCE_COLORMAP](np.nan_to_num(confidence, nan=0.0).reshape(rows, cols))
        confidence_colors[np.isnan(confidence).reshape(rows, cols)] = to_rgba(UNKNOWN_CONFIDENCE_COLOR)
        panels = ((order_axes, order_colors, "fill order (1 = committed first)"),
                  (confidence_axes, confidence_colors, "confidence at commit (0 to 1)"))
        for axes, colors, title in panels:
            axes.imshow(colors, interpolation="nearest")
            axes.set_title(title, fontsize=10)
            axes.set_xticks(range(cols), [str(c + 1) for c in range(cols)], fontsize=7)
            axes.set_yticks(range(rows), [str(r + 1) for r in range(rows)], fontsize=7)
            axes.set_xlabel("column", fontsize=8)
            axes.set_ylabel("row", fontsize=8)
            _draw_box_lines(axes, rows, cols)
            for cell in range(cells):
                r, c = divmod(cell, cols)
                ink = WRONG_COLOR if wrong_cells[cell] else _ink(colors[r, c])
                axes.text(c, r, name(final[cell]), ha="center", va="center", fontsize=10,
                          color=ink, fontweight="bold" if wrong_cells[cell] else "normal")
                if given[cell]:
                    axes.add_patch(Rectangle((c - 0.45, r - 0.45), 0.9, 0.9, fill=False,
                                             edgecolor=GIVEN_EDGE_COLOR, linewidth=1.4))
        for cell in range(cells):
            if order[cell]:
                r, c = divmod(cell, cols)
                order_axes.text(c - 0.42, r - 0.42, str(order[cell]), ha="left", va="top", fontsize=5,
                                color=_ink(order_colors[r, c]))
        self.figure.colorbar(ScalarMappable(order_norm, ORDER_COLORMAP), ax=order_axes, shrink=0.8,
                             label="commit order")
        self.figure.colorbar(ScalarMappable(Normalize(0, 1), CONFIDENCE_COLORMAP), ax=confidence_axes,
                             shrink=0.8, label="confidence")
        solved = "wrong cells in red" if any(wrong_cells) else "every cell matches the target" \
            if wrong is not None else "no target recorded"
        drawn = f" of the first {cells} of {region} output positions" if region > cells else ""
        self.figure.suptitle(f"sample {sample.sample_id}: {rows}x{cols} grid{drawn} after {sample.num_steps} "
                             f"steps; blue frame = given in the prompt; {solved}", fontsize=10)

    def save_png(self, path: Path) -> None:
        """Write the picture to ``path`` (temporary file, then renamed)."""
        with written_atomically(path) as temporary:
            self.figure.savefig(temporary, format="png")


def _draw_box_lines(axes, rows: int, cols: int) -> None:
    """Thin lines between cells, thick ones between 3x3 boxes when the sides are multiples of 3."""
    for index in range(1, cols):
        axes.axvline(index - 0.5, color="black", linewidth=1.8 if cols % 3 == 0 and index % 3 == 0 else 0.4)
    for index in range(1, rows):
        axes.axhline(index - 0.5, color="black", linewidth=1.8 if rows % 3 == 0 and index % 3 == 0 else 0.4)


def _ink(rgba) -> str:
    """Black or white text, whichever reads on ``rgba``."""
    red, green, blue = rgba[:3]
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"
