"""One training at a time in a run directory.

A training holds an exclusive ``flock`` on ``<run_dir>/.xdllm-train.lock`` from the moment it
claims the directory until it returns; the file says which process holds it and since when. A
second ``xdllm train`` into that directory (a new run, ``resume=`` of it, or
``existing_run_dir=move_aside``, which would move the running run aside) is refused in one line
naming that process. The kernel drops the lock when its process ends, however it ends (SIGKILL,
a crash, the machine's out-of-memory killer), so a lock file left behind never blocks anyone.
"""

from __future__ import annotations

import fcntl
import os
from datetime import datetime
from pathlib import Path

from xdllm.errors import XdllmError

LOCK_NAME = ".xdllm-train.lock"


def _in_use(run_dir: Path, path: Path) -> XdllmError:
    try:
        holder = path.read_text().strip() or "another process"
    except OSError:
        holder = "another process"
    return XdllmError(f"run_dir {run_dir} is in use by a training still running ({holder}); wait for it to end "
                      "or stop it, or choose another run_dir")


def _try_lock(run_dir: Path, create: bool) -> int | None:
    """An open descriptor of the lock file holding its exclusive lock; None when there is no lock
    file and ``create`` is false. A lock another process holds is refused."""
    path = run_dir / LOCK_NAME
    try:
        descriptor = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    except FileNotFoundError:
        if create:
            raise
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise _in_use(run_dir, path) from None
    return descriptor


def refuse_if_training(run_dir: Path) -> None:
    """Refuse ``run_dir`` while a training holds it (checked before it is moved aside or resumed)."""
    descriptor = _try_lock(run_dir, create=False)
    if descriptor is not None:
        os.close(descriptor)


class RunDirLock:
    """The lock of ``run_dir`` (made if missing), held until :meth:`release`."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self._descriptor: int | None = _try_lock(run_dir, create=True)
        os.ftruncate(self._descriptor, 0)
        os.write(self._descriptor, f"pid {os.getpid()}, started {datetime.now():%Y-%m-%d %H:%M:%S}\n".encode())

    def release(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing the descriptor drops the flock
            self._descriptor = None
