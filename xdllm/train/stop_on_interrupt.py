"""Ctrl-C or SIGTERM during training stops it cleanly: the first Ctrl-C (or a SIGTERM, as a job
scheduler, ``timeout``, ``docker stop`` or ``kill`` send) lets the optimizer step under way finish
(or a validation under way, then one more step), saves ``last.ckpt`` and ends training; a second
Ctrl-C stops at once, as Python's default does (a second SIGTERM changes nothing: the stop is
under way; SIGKILL is the way to stop at once).

Stopping between steps, never inside one, is what makes the saved state resumable: a
``KeyboardInterrupt`` raised inside ``optimizer.step()`` could leave half the parameters updated.
A terminal or a scheduler signals DataLoader workers too: xdllm's workers ignore both signals
unless the trainer sends them (:mod:`xdllm.data.worker_signals`), and any other process forked
from the trainer while the handlers are installed leaves the decision to its parent, so batches
keep coming until training ends.

Lightning installs a SIGTERM handler of its own when the fit starts, which calls the one it found
after its own; its own ends the fit after the step, or in the middle of a validation, without
saving, and the process exits with status 0. :class:`StopOnInterrupt` installs its handler before
Lightning's and again over it when training starts, so that only its own runs.
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

STOP_MESSAGE = "\n{cause}: stopping after {what} and saving checkpoints/last.ckpt{again}"
SECOND_PRESS = " (press Ctrl-C again to stop at once)"
SIGNAL_CAUSES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


class StoppedByInterrupt(Exception):
    """Raised out of the fit after the step a Ctrl-C or SIGTERM (``cause``) stopped training at,
    once it is saved."""

    def __init__(self, step: int, cause: str = "Ctrl-C") -> None:
        super().__init__(f"training stopped by {cause} after step {step}")
        self.step = step
        self.cause = cause


class StopOnInterrupt(L.Callback):
    """Installs the SIGINT and SIGTERM handlers for the fit. At the end of the step after either
    signal, calls ``save(trainer)`` and raises :class:`StoppedByInterrupt`.
    With several processes the decision is shared at the logging steps
    (``trainer.log_every_n_steps``), where metrics are read anyway, so that every process stops
    after the same step (one process receiving the signal is enough); a single process checks
    after every step (a Python flag, no synchronisation)."""

    def __init__(self, save: Callable[[L.Trainer], None]) -> None:
        self.save = save
        self.requested = False
        self.cause = ""
        self._outside: dict[int, Any] = {}  # the handlers found at setup: put back after the fit
        self._pid: int | None = None
        self._trainer: L.Trainer | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or threading.current_thread() is not threading.main_thread():
            return
        for signum in SIGNAL_CAUSES:
            previous = signal.getsignal(signum)
            if previous is signal.SIG_IGN:  # started in the background, or told to: the signal cannot stop it
                continue
            self._outside[signum] = previous
            self._pid, self._trainer = os.getpid(), trainer
            signal.signal(signum, self._on_signal)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning's handler, installed as the fit started, calls this one after its own, which
        # ends the fit without saving: this one alone while training runs; Lightning puts back
        # the one it found (this one) when it tears down, and teardown() the original
        if signal.SIGTERM in self._outside and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:  # a forked DataLoader worker: its main process decides
            return
        if self._trainer is None:  # the fit is over (Lightning puts back the handlers it found): those before it
            outside = self._outside.get(signum, signal.SIG_DFL)
            if callable(outside):  # Python's KeyboardInterrupt for SIGINT; xdllm's Terminated for SIGTERM
                outside(signum, frame)
                return
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.requested:
            if signum == signal.SIGINT:
                self._restore()
                raise KeyboardInterrupt
            return  # another SIGTERM: the stop is under way
        self.requested, self.cause = True, SIGNAL_CAUSES[signum]
        if self._trainer is not None and not self._trainer.is_global_zero:
            return  # every process gets the signal from a terminal; the first one says so
        validating = self._trainer is not None and self._trainer.validating
        what = "the validation under way and the next optimizer step" if validating else "this optimizer step"
        again = SECOND_PRESS if signum == signal.SIGINT else ""
        print(STOP_MESSAGE.format(cause=self.cause, what=what, again=again), file=sys.stderr, flush=True)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        requested = self.requested
        if trainer.world_size > 1:
            if trainer.global_step % max(1, trainer.log_every_n_steps) != 0:
                return
            requested = trainer.strategy.reduce_boolean_decision(requested, all=False)
        if requested:
            self.save(trainer)
            raise StoppedByInterrupt(trainer.global_step, self.cause or "a signal to another process")

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._restore()

    def _restore(self) -> None:
        if self._pid != os.getpid():
            return
        for signum, previous in self._outside.items():
            signal.signal(signum, previous)
        self._trainer = None
