"""Validation curves: named series an evaluator derives from its metrics (e.g. an accuracy per
block position), drawn as one line figure per validation in TensorBoard (``val/<name>``, the
image slider steps through validations)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure
from torch.utils.tensorboard import SummaryWriter

Curve = Sequence[tuple[float, float]]
"""``(x, y)`` points, in drawing order."""


def curve_figure(name: str, points: Curve, step: int) -> Figure:
    """A small line figure of ``points``, titled with the curve's name and the step."""
    figure = Figure(figsize=(4.0, 2.6), dpi=100)
    axes = figure.add_subplot()
    xs, ys = [x for x, _ in points], [y for _, y in points]
    axes.plot(xs, ys, marker="o")
    axes.set_title(f"{name} (step {step})", fontsize=9)
    axes.set_xticks(xs)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def write_curves(writer: SummaryWriter, curves: Mapping[str, Curve], step: int) -> None:
    """Every non-empty curve as the image ``val/<name>`` at ``step``."""
    for name, points in curves.items():
        if points:
            writer.add_figure(f"val/{name}", curve_figure(name, points, step), global_step=step, close=True)
