"""Training progress as plain, timestamped lines: what a log file or a cluster scheduler keeps.

A progress bar redraws one line with carriage returns and cursor escapes, which a file stores as
one ever-growing line; off a terminal xdllm prints one line per ``every_n_steps`` optimizer steps
and one per validation instead (under a progress bar the same lines go to the run's log only,
:mod:`xdllm.run.run_log`)::

    2026-11-23 00:51:02 step 100/1500 train/loss=0.4121 train/grad_norm=0.82 lr=0.00098 (13.9 steps/s)
    2026-11-23 00:51:20 validation at step 250 (2.9 s): val/exact_match=0.4258 val/loss=0.2612
    2026-11-23 00:53:03 trained 1500 steps in 112.4 s: 14.2 steps/s, and 6 validations in 17.3 s

The steps per second are training's own: a validation's time is not counted in the next line's
rate (it is the validation line's seconds), nor in the last line's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import lightning as L

from xdllm.counted import counted
from xdllm.log_marks import FILE_ONLY, STAMPED

logger = logging.getLogger(__name__)


def _format(metrics: Mapping[str, Any], prefixes: tuple[str, ...]) -> str:
    shown = []
    for name in sorted(metrics):
        if name.startswith(prefixes) and name != "train/samples_seen":
            shown.append(f"{name}={float(metrics[name]):.4g}")
    return " ".join(shown)


class MetricLines(L.Callback):
    """Logs training metrics every ``every_n_steps`` optimizer steps and validation metrics after
    each validation, as single lines on the ``xdllm`` logger (stderr)."""

    def __init__(self, every_n_steps: int, file_only: bool = False) -> None:
        if every_n_steps < 1:
            raise ValueError(f"MetricLines: every_n_steps must be >= 1, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self._marks = {STAMPED: True, FILE_ONLY: file_only}  # file_only: a progress bar shows them
        self._since: tuple[float, int] | None = None
        self._started: tuple[float, int] | None = None  # when and at which step training started
        self._validation_started: float | None = None
        self._validations: list[float] = []  # each validation's seconds

    @staticmethod
    def _stamp() -> str:
        return datetime.now().strftime("%Y-%m-%d %H:%M:%S")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._since = self._started = (time.perf_counter(), trainer.global_step)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step % self.every_n_steps or not trainer.is_global_zero:
            return
        now = time.perf_counter()
        started, first_step = self._since or (now, step)
        rate = (step - first_step) / max(now - started, 1e-9)
        self._since = (now, step)
        metrics = _format(trainer.callback_metrics, ("train/", "lr"))
        logger.info("%s step %d/%d %s (%.1f steps/s)", self._stamp(), step, trainer.max_steps, metrics, rate,
                    extra=self._marks)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validation_started = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        now = time.perf_counter()
        seconds = 0.0 if self._validation_started is None else now - self._validation_started
        if self._started is not None:  # training's (not the sanity check's): the next rate counts from here
            self._since = (now, trainer.global_step)
            self._validations.append(seconds)
        if trainer.is_global_zero and not trainer.sanity_checking:
            metrics = _format(trainer.callback_metrics, ("val/",))
            logger.info("%s validation at step %d (%.1f s): %s", self._stamp(), trainer.global_step, seconds,
                        metrics, extra=self._marks)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._started is None or not trainer.is_global_zero:
            return
        started, first_step = self._started
        total = time.perf_counter() - started
        validating = sum(self._validations)
        steps = trainer.global_step - first_step
        logger.info("%s trained %s in %.1f s: %.1f steps/s, and %s in %.1f s", self._stamp(), counted(steps, "step"),
                    total, steps / max(total - validating, 1e-9), counted(len(self._validations), "validation"),
                    validating, extra=self._marks)
