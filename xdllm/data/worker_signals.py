"""DataLoader workers leave stopping to the main process.

A terminal (Ctrl-C) and a job scheduler (SIGTERM to the job's process group) signal every process
of the group, DataLoader workers included. PyTorch gives each worker a handler that ends it on
SIGTERM; the main process then fails wherever it is (its SIGCHLD handler raises "DataLoader
worker ... is killed by signal: Terminated", in the middle of an optimizer step if it comes then)
instead of stopping after the step with that step saved (:mod:`xdllm.train.stop_on_interrupt`).

Workers ignore SIGINT, and SIGTERM from every process but the main one. The main process's own
SIGTERM still ends a worker at once: PyTorch's DataLoader sends it to a worker that did not exit
when asked, and Python's exit sends it to every worker still running and then waits for them
without a time limit (an ignored SIGTERM there hung the process for good). A worker tells the
senders apart by blocking SIGTERM and taking it with ``sigwaitinfo``, which names the sender; it
then exits with status 0, as PyTorch's own worker handler does for the main process's SIGTERM
(the DataLoader reports any other status as a failed worker).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading


def ignore_stop_signals(worker_id: int) -> None:
    """``worker_init_fn`` of xdllm's DataLoaders: SIGINT is ignored, SIGTERM obeyed only from the
    main process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # blocked before any other thread of the worker starts, so every later thread inherits the mask
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(target=_exit_on_sigterm_from, args=(multiprocessing.parent_process().pid,), daemon=True,
                     name=f"xdllm-worker-{worker_id}-sigterm").start()


def _exit_on_sigterm_from(main_process: int) -> None:
    while True:
        if signal.sigwaitinfo({signal.SIGTERM}).si_pid == main_process:
            os._exit(0)
