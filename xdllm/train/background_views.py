"""The TensorBoard views of validation history, drawn in another process while training goes on.

Drawing the denoising pictures is matplotlib work on one CPU core: for ``varlen_sort_packed``'s
8 samples of about 32 steps it took 11 s of an 18 s validation on the CPU, and on an H200 a
validation of that run took 20 to 23 s where generating 512 samples takes 3 (docs/training.md).
Training on an accelerator leaves CPU cores idle, so there (``ValidationHistory``'s default)
each validation's views are handed to one spawned worker process, which reads the history files
it was given (they hold the token strings, so no tokenizer travels) and writes the event files.
Nothing is lost or left half-written when training ends: :meth:`BackgroundViews.finish` waits
for every view handed over, and a view that fails is reported with the command that draws it
again from the history files, which training wrote itself and are complete."""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import torch

from xdllm.history import write_tensorboard

log = logging.getLogger(__name__)


def _one_thread() -> None:
    """The worker draws; the training process keeps the cores for its own threads."""
    torch.set_num_threads(1)


def _write_views(history_dir: Path, logdir: Path, max_samples: int, grid: tuple[int, int] | None) -> list[str]:
    """Write the views of ``history_dir`` into ``logdir``; the files that could not be read."""
    report = write_tensorboard([history_dir], logdir, max_samples=max_samples, grid=grid)
    return [f"{path}: {error}" for path, error in report.bad_files]


class BackgroundViews:
    """Hands each validation's history to a worker process (started at the first one) that
    writes its TensorBoard views; :meth:`finish` waits for all of them."""

    def __init__(self) -> None:
        self._executor: ProcessPoolExecutor | None = None
        self._pending: list[tuple[Path, Path, Future]] = []

    def submit(self, history_dir: Path, logdir: Path, max_samples: int, grid: tuple[int, int] | None) -> None:
        """Start writing the views of ``history_dir`` into ``logdir``; report views finished since."""
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_one_thread)
        future = self._executor.submit(_write_views, Path(history_dir), Path(logdir), max_samples, grid)
        self._pending.append((Path(history_dir), Path(logdir), future))
        self._report(wait=False)

    def finish(self) -> None:
        """Wait for every view handed over, report each, and stop the worker."""
        self._report(wait=True)
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None

    def _report(self, wait: bool) -> None:
        still = []
        for history_dir, logdir, future in self._pending:
            if not wait and not future.done():
                still.append((history_dir, logdir, future))
                continue
            try:
                unreadable = future.result()
            except Exception as error:  # the worker's own error, or the worker died (BrokenProcessPool)
                log.error("the TensorBoard views of %s were not written (%s: %s); the history files are complete: "
                          "draw them with `xdllm history tensorboard %s --logdir %s`",
                          history_dir, type(error).__name__, error, history_dir, logdir)
                continue
            for line in unreadable:
                log.error("TensorBoard views of validation history: skipped an unreadable file: %s", line)
        self._pending = still
