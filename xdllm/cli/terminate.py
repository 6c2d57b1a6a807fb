"""SIGTERM stops an xdllm command as Ctrl-C does.

``kill``, ``timeout``, ``docker stop`` and job schedulers send SIGTERM, and Python's default is
to die on the spot: no ``finally`` block runs, so a generation stopped that way lost the
predictions of the batches it had finished and left a half-written folder, with no word on
stderr. While a command runs, SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``) where
Ctrl-C would raise ``KeyboardInterrupt``: what the command finished is kept and it ends with one
line and status 143. A second SIGTERM while that cleanup runs changes nothing (SIGKILL stops at
once). Training replaces this handler while it fits (:mod:`xdllm.train.stop_on_interrupt`: stop
after the step under way, saved) and puts it back after.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from xdllm.errors import Terminated


class _RaiseOnce:
    def __init__(self) -> None:
        self.raised = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not self.raised:
            self.raised = True
            raise Terminated


@contextmanager
def sigterm_raises_terminated() -> Iterator[None]:
    """Within the block, the first SIGTERM raises :class:`Terminated` in the main thread; the
    handler found is put back after. Nothing changes where SIGTERM is ignored (the process was
    told to ignore it) or off the main thread (Python allows handlers only there)."""
    if threading.current_thread() is not threading.main_thread() or (
            signal.getsignal(signal.SIGTERM) is signal.SIG_IGN):
        yield
        return
    previous = signal.signal(signal.SIGTERM, _RaiseOnce())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
