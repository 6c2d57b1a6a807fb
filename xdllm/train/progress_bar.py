"""Lightning's progress bar, showing the training loss without a host synchronisation per step.

A metric logged with ``prog_bar=True`` is turned into a Python number after every training step
(Lightning's logger connector does it whether or not a bar is drawn), and on a GPU that ``item()``
makes the host wait for the step to finish: the loop's own work between steps (hooks, the next
batch, the first kernel launches) then runs while the GPU idles. The training loss is therefore
logged without ``prog_bar``, and this bar reads it itself, every ``every_n_steps`` optimizer
steps (``progress_every_n_steps``, by default the logging interval, when Lightning reads the
logged metrics anyway). Validation metrics, read once per validation, keep ``prog_bar``.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar
from lightning.pytorch.callbacks.progress.rich_progress import RichProgressBar
from lightning.pytorch.utilities.imports import _RICH_AVAILABLE

SHOWN_METRIC = "train/loss"


class _LossEveryNSteps:
    """Adds ``train/loss`` to a Lightning progress bar's items, read every ``every_n_steps``
    optimizer steps and shown unchanged in between."""

    def __init__(self, every_n_steps: int) -> None:
        if every_n_steps < 1:
            raise ValueError(f"progress bar: every_n_steps must be >= 1, got {every_n_steps}")
        super().__init__()
        self.every_n_steps = every_n_steps
        self._read_at: int | None = None
        self._shown: dict[str, float] = {}

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        step = trainer.global_step
        if step != self._read_at and step % self.every_n_steps == 0:
            value = trainer.callback_metrics.get(SHOWN_METRIC)
            if value is not None:
                self._shown = {SHOWN_METRIC: float(value)}
                self._read_at = step
        return {**items, **self._shown}


class RichTrainingProgressBar(_LossEveryNSteps, RichProgressBar):
    """Lightning's rich bar (its default where ``rich`` is installed) with the loss read every
    ``every_n_steps`` steps, titled ``Training``: xdllm trains by steps in one endless epoch
    (``max_epochs=-1``), which the rich bar would title ``Epoch 0/-2``."""

    def _get_train_description(self, current_epoch: int) -> str:
        return f"{'Training':{len(self.validation_description)}}"


class TqdmTrainingProgressBar(_LossEveryNSteps, TQDMProgressBar):
    """Lightning's tqdm bar (its default without ``rich``) with the loss read every
    ``every_n_steps`` steps."""


def training_progress_bar(every_n_steps: int) -> ProgressBar:
    """The bar Lightning would choose (rich where installed, else tqdm), reading the loss every
    ``every_n_steps`` optimizer steps."""
    bar = RichTrainingProgressBar if _RICH_AVAILABLE else TqdmTrainingProgressBar
    return bar(every_n_steps)
