"""``last.ckpt`` is always the newest training state: written every N optimizer steps and when
training ends, whatever the validation metric did."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning as L

from xdllm.temporary_files import temporary_path
from xdllm.train.checkpoint_layout import LAST_NAME, step_checkpoint_name


class LatestCheckpoint(L.Callback):
    """Saves ``<folder>/last.ckpt`` after every ``every_n_steps``-th optimizer step and at the end
    of training; with ``keep_every_n_steps`` also keeps ``step<N>.ckpt`` at those steps (linked to
    ``last.ckpt``, not written twice). Every process calls the save (it is collective); the
    checkpoint IO writes on the first process only."""

    def __init__(self, folder: str | os.PathLike, every_n_steps: int, keep_every_n_steps: int | None = None) -> None:
        if every_n_steps < 1:
            raise ValueError(f"LatestCheckpoint: every_n_steps must be >= 1, got {every_n_steps}")
        if keep_every_n_steps is not None and keep_every_n_steps < 1:
            raise ValueError(f"LatestCheckpoint: keep_every_n_steps must be >= 1 or None, got {keep_every_n_steps}")
        self.folder = Path(folder)
        self.every_n_steps = every_n_steps
        self.keep_every_n_steps = keep_every_n_steps
        self._saved_step: int | None = None

    def save(self, trainer: L.Trainer) -> None:
        """Save ``last.ckpt`` now (nothing if it holds this step already)."""
        step = trainer.global_step
        if step == self._saved_step:
            return
        last = self.folder / LAST_NAME
        trainer.save_checkpoint(last, weights_only=False)
        if self.keep_every_n_steps and step % self.keep_every_n_steps == 0 and trainer.is_global_zero:
            kept = self.folder / step_checkpoint_name(step)
            temporary = temporary_path(kept)
            os.link(last, temporary)  # the same bytes under a second name, then an atomic rename
            os.replace(temporary, kept)
        self._saved_step = step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step % self.every_n_steps == 0 or (self.keep_every_n_steps and step % self.keep_every_n_steps == 0):
            self.save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.save(trainer)
