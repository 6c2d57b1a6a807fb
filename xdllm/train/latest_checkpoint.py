"""``last.ckpt`` is always the newest training state: written every N optimizer steps and when
training ends, whatever the validation metric did.

A validation at a step just saved changes what the state holds (the best value of ``best.ckpt``'s
metric, ``early_stopping``'s count of validations without improvement) and is not run again by a
resume from that step: ``last.ckpt`` is written again after it. Without that, a run resumed from a
step it validated at forgot that validation: a later, worse value than its could replace
``best.ckpt``. (The first write stays: a validation that fails loses no steps.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.trainer.states import TrainerFn

from xdllm.temporary_files import temporary_path
from xdllm.train.checkpoint_layout import LAST_NAME, step_checkpoint_name


class LatestCheckpoint(Checkpoint):
    """Saves ``<folder>/last.ckpt`` after every ``every_n_steps``-th optimizer step, again after a
    validation at that step, and at the end of training; with ``keep_every_n_steps`` also keeps
    ``step<N>.ckpt`` at those steps (linked to ``last.ckpt``, not written twice). Every process
    calls the save (it is collective); the checkpoint IO writes on the first process only.
    A ``Checkpoint``, so that Lightning calls it after the other callbacks (``best.ckpt``'s
    included, when it comes after that one in the list) once a validation ends."""

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

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking and (
                self._saved_step == trainer.global_step):
            self._saved_step = None
            self.save(trainer)
