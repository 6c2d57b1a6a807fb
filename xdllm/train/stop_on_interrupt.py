"""Ctrl-C during training stops it cleanly: the first press lets the optimizer step under way
finish (or a validation under way, then one more step), saves ``last.ckpt`` and ends training;
a second press stops at once, as Python's default does.

Stopping between steps, never inside one, is what makes the saved state resumable: a
``KeyboardInterrupt`` raised inside ``optimizer.step()`` could leave half the parameters updated.
DataLoader workers forked while the handler is installed inherit it and ignore the signal (the
terminal sends it to them too), so they keep serving batches until training ends.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import lightning as L

STOP_MESSAGE = ("\nCtrl-C: stopping after {what} and saving checkpoints/last.ckpt "
                "(press Ctrl-C again to stop at once)")


class StoppedByInterrupt(Exception):
    """Raised out of the fit after the step a Ctrl-C stopped training at, once it is saved."""

    def __init__(self, step: int) -> None:
        super().__init__(f"training stopped by Ctrl-C after step {step}")
        self.step = step


class StopOnInterrupt(L.Callback):
    """Installs the SIGINT handler for the fit. At the end of the step after a Ctrl-C, calls
    ``save(trainer)`` and raises :class:`StoppedByInterrupt`. With several processes the decision
    is shared at the logging steps (``trainer.log_every_n_steps``), where metrics are read anyway,
    so that every process stops after the same step; a single process checks after every step
    (a Python flag, no synchronisation)."""

    def __init__(self, save: Callable[[L.Trainer], None]) -> None:
        self.save = save
        self.requested = False
        self._previous: Any = None
        self._pid: int | None = None
        self._trainer: L.Trainer | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.SIG_IGN:  # started in the background: Ctrl-C cannot reach it anyway
            return
        self._previous, self._pid, self._trainer = previous, os.getpid(), trainer
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:  # a forked DataLoader worker: its main process decides
            return
        if self.requested:
            self._restore()
            raise KeyboardInterrupt
        self.requested = True
        if self._trainer is not None and not self._trainer.is_global_zero:
            return  # every process gets the signal from a terminal; the first one says so
        validating = self._trainer is not None and self._trainer.validating
        what = "the validation under way and the next optimizer step" if validating else "this optimizer step"
        print(STOP_MESSAGE.format(what=what), file=sys.stderr, flush=True)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        requested = self.requested
        if trainer.world_size > 1:
            if trainer.global_step % max(1, trainer.log_every_n_steps) != 0:
                return
            requested = trainer.strategy.reduce_boolean_decision(requested, all=False)
        if requested:
            self.save(trainer)
            raise StoppedByInterrupt(trainer.global_step)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._restore()

    def _restore(self) -> None:
        if self._pid == os.getpid() and self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous, self._trainer = None, None
