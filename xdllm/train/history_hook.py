"""Denoising history during training: record a few validation samples, render them in TensorBoard."""

from __future__ import annotations

from pathlib import Path

import lightning as L

from xdllm.history import HistoryTopKPlugin
from xdllm.interfaces import Tokenizer
from xdllm.train.background_views import BackgroundViews, report_unreadable, write_validation_views


class ValidationHistory(L.Callback):
    """Hands the harness a recorder for the first prediction batch of each validation run
    (global rank 0 only) and writes its TensorBoard views when validation ends.

    Files: ``<run>/history/val-step<N>/`` and ``<run>/tensorboard/history-step<N>/``. ``grid``:
    the task's grid shape, if its answers are grids (sudoku), for the grid pictures.

    ``background``: write the views in another process while training goes on
    (:mod:`xdllm.train.background_views`), waiting for them when training ends or fails; None
    (default): when the model trains on an accelerator, whose training process leaves CPU cores
    idle (on the CPU, drawing would only take cores from training).
    """

    def __init__(self, run_dir: Path, tokenizer: Tokenizer, num_samples: int, k: int,
                 grid: tuple[int, int] | None = None, background: bool | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.grid = grid
        self.tokenizer = tokenizer
        self.num_samples = num_samples
        self.k = k
        self._is_global_zero = True
        self._pending: tuple[int, Path] | None = None
        self.background = background
        self._views = BackgroundViews()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._is_global_zero = trainer.is_global_zero
        if self.background is None:
            self.background = trainer.strategy.root_device.type != "cpu"

    def recorder_for_step(self, global_step: int) -> HistoryTopKPlugin | None:
        if not self._is_global_zero or self.num_samples <= 0:
            return None
        directory = self.run_dir / "history" / f"val-step{global_step:07d}"
        self._pending = (global_step, directory)
        return HistoryTopKPlugin(k=self.k, output_dir=directory, max_samples=self.num_samples,
                                 tokenizer=self.tokenizer, split="validation")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._pending is None:
            return
        step, directory = self._pending
        self._pending = None
        logdir = self.run_dir / "tensorboard" / f"history-step{step:07d}"
        if self.background:
            self._views.submit(directory, logdir, max_samples=self.num_samples, grid=self.grid)
        else:
            report_unreadable(write_validation_views(directory, logdir, self.num_samples, self.grid, self.tokenizer))

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._views.finish()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._views.finish()
