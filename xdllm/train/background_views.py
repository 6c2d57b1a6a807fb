"""The TensorBoard views of validation history, drawn in another process while training goes on.

Drawing the denoising pictures is matplotlib work on one CPU core: for ``varlen_sort_packed``'s
8 samples of about 32 steps it took 11 s of an 18 s validation on the CPU, and on an H200 a
validation of that run took 20 to 23 s where generating 512 samples takes 3 (docs/training.md).
Training on an accelerator leaves CPU cores idle, so there (``ValidationHistory``'s default)
each validation's views are handed to one worker process (``python -m
xdllm.train.background_views``, one JSON line per job on its stdin, one per result on its
stdout), which reads the history files it was given (they hold the token strings, so no
tokenizer travels) and writes the event files. A fresh interpreter running this module, not a
``multiprocessing`` child: a spawned child imports the caller's main script again, and a
training script without an ``if __name__ == "__main__":`` guard would train a second time.
Nothing is lost or left half-written when training ends: :meth:`BackgroundViews.finish` waits
for every view handed over, and a view that fails is reported with the command that draws it
again from the history files, which training wrote itself and are complete."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from pathlib import Path

import torch

from xdllm.history import write_tensorboard
from xdllm.interfaces import Tokenizer

log = logging.getLogger(__name__)


def write_validation_views(history_dir: Path, logdir: Path, max_samples: int, grid: tuple[int, int] | None,
                           tokenizer: Tokenizer | None = None) -> list[str]:
    """Write the views of one validation's history; the files that could not be read
    (``"path: reason"``), every readable one being written."""
    report = write_tensorboard([history_dir], logdir, max_samples=max_samples, tokenizer=tokenizer, grid=grid)
    return [f"{path}: {error}" for path, error in report.bad_files]


def report_unreadable(lines: list[str]) -> None:
    """Log each history file the views skipped (drawn here or by the worker)."""
    for line in lines:
        log.error("TensorBoard views of validation history: skipped an unreadable file: %s", line)


class BackgroundViews:
    """Hands each validation's history to a worker process (started at the first one) that
    writes its TensorBoard views; :meth:`finish` waits for all of them."""

    def __init__(self) -> None:
        self._worker: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._submitted: list[dict] = []
        self._done: set[str] = set()

    def submit(self, history_dir: Path, logdir: Path, max_samples: int, grid: tuple[int, int] | None) -> None:
        """Start writing the views of ``history_dir`` into ``logdir`` (after those handed over before)."""
        if self._worker is None:
            self._worker = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True)
            self._reader = threading.Thread(target=self._read_results, args=(self._worker.stdout,), daemon=True)
            self._reader.start()
        job = {"history_dir": str(history_dir), "logdir": str(logdir), "max_samples": max_samples,
               "grid": list(grid) if grid is not None else None}
        self._submitted.append(job)
        try:
            self._worker.stdin.write(json.dumps(job) + "\n")
            self._worker.stdin.flush()
        except OSError:  # the worker is gone: finish() reports every view it did not write
            pass

    def finish(self) -> None:
        """Wait for every view handed over, report those not written, and stop the worker."""
        if self._worker is None:
            return
        waiting = [job["history_dir"] for job in self._submitted if job["history_dir"] not in self._done]
        if waiting:
            log.info("waiting for the TensorBoard views of %d validation(s) still being drawn in another process "
                     "(%s)", len(waiting), ", ".join(Path(folder).name for folder in waiting))
        try:
            self._worker.stdin.close()  # the worker ends after the jobs it was given
        except OSError:  # it is gone already: the views it did not write are reported below
            pass
        code = self._worker.wait()
        self._reader.join()
        for job in self._submitted:
            if job["history_dir"] not in self._done:
                _report(job, f"the views' worker process exited with code {code} first")
        self._worker, self._reader, self._submitted, self._done = None, None, [], set()

    def _read_results(self, results) -> None:
        for line in results:
            result = json.loads(line)
            self._done.add(result["history_dir"])
            if result["error"] is not None:
                _report(result, result["error"])
            report_unreadable(result["unreadable"])


def _report(job: dict, error: str) -> None:
    log.error("the TensorBoard views of %s were not written (%s); the history files are complete: "
              "draw them with `xdllm history tensorboard %s --logdir %s`",
              job["history_dir"], error, job["history_dir"], job["logdir"])


def main() -> None:
    """The worker: one job per line of stdin, one result per line of stdout, in order."""
    torch.set_num_threads(1)  # the training process keeps the cores for its own threads
    results, sys.stdout = sys.stdout, sys.stderr  # whatever else prints cannot garble the results
    for line in sys.stdin:
        job = json.loads(line)
        result = {"history_dir": job["history_dir"], "logdir": job["logdir"], "error": None, "unreadable": []}
        try:
            result["unreadable"] = write_validation_views(
                Path(job["history_dir"]), Path(job["logdir"]), job["max_samples"],
                tuple(job["grid"]) if job["grid"] is not None else None)
        except Exception as error:  # reported by the training process, with the command that redraws
            result["error"] = f"{type(error).__name__}: {error}"
        print(json.dumps(result), file=results, flush=True)


if __name__ == "__main__":
    main()
