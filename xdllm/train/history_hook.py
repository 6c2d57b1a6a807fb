"""Denoising history during training: record a few validation samples, render them in TensorBoard."""

from __future__ import annotations

from pathlib import Path

import lightning as L

from xdllm.history import HistoryTopKPlugin, write_tensorboard
from xdllm.interfaces import Tokenizer


class ValidationHistory(L.Callback):
    """Hands the harness a recorder for the first prediction batch of each validation run
    (global rank 0 only) and writes its TensorBoard views when validation ends.

    Files: ``<run>/history/val-step<N>/`` and ``<run>/tensorboard/history-step<N>/``. ``grid``:
    the task's grid shape, if its answers are grids (sudoku), for the grid pictures.
    """

    def __init__(self, run_dir: Path, tokenizer: Tokenizer, num_samples: int, k: int,
                 grid: tuple[int, int] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.grid = grid
        self.tokenizer = tokenizer
        self.num_samples = num_samples
        self.k = k
        self._is_global_zero = True
        self._pending: tuple[int, Path] | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._is_global_zero = trainer.is_global_zero

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
        write_tensorboard([directory], self.run_dir / "tensorboard" / f"history-step{step:07d}",
                          max_samples=self.num_samples, tokenizer=self.tokenizer, grid=self.grid)
