"""DataLoader workers leave stopping to the main process.

A terminal (Ctrl-C) and a job scheduler (SIGTERM to the job's process group) signal every process
of the group, DataLoader workers included. PyTorch gives each worker a handler that ends it on
SIGTERM; the main process then fails wherever it is (its SIGCHLD handler raises "DataLoader
worker ... is killed by signal: Terminated", in the middle of an optimizer step if it comes then)
instead of stopping after the step with that step saved (:mod:`xdllm.train.stop_on_interrupt`).
Workers ignore both signals; they still exit when the main process shuts them down, and on their
own when it dies.
"""

from __future__ import annotations

import signal

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def ignore_stop_signals(worker_id: int) -> None:
    """``worker_init_fn`` of xdllm's DataLoaders: the worker ignores SIGINT and SIGTERM."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
