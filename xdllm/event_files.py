"""TensorBoard event files as xdllm writes them: a write that fails (a full disk) is one
``OSError`` named with the event folder, raised where xdllm writes, not a traceback of a thread.

``SummaryWriter`` writes from a background thread. When a write fails there, the thread stores
the error, dies, and Python prints its traceback ("Exception in thread ..."); the writer raises
the same error again at its next write or flush in the caller's thread, but not at ``close``,
so an error after the last write was lost with only that traceback to show for it (seen
generating onto a full 140 kB tmpfs: predictions written, then a 40-line thread traceback).
:func:`event_writer` flushes before closing, so the error always reaches the caller, and
:func:`quiet_event_writer_threads` drops the thread's print of an error the caller gets.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from xdllm.event_checksums import use_fast_event_checksums

WRITER_THREAD = "_AsyncWriterThread"
"""The class of tensorboard's writing thread (``tensorboard.summary.writer.event_file_writer``)."""


@contextlib.contextmanager
def event_writer(log_dir: str | os.PathLike, **options: Any) -> Iterator[Any]:
    """A ``SummaryWriter`` into ``log_dir``, flushed and closed when the block ends, its records
    checksummed in C (:mod:`xdllm.event_checksums`); an ``OSError`` that names no file is raised
    named with ``log_dir``."""
    from torch.utils.tensorboard import SummaryWriter

    use_fast_event_checksums()
    try:
        with SummaryWriter(log_dir=os.fspath(log_dir), **options) as writer:
            yield writer
            writer.flush()  # a write the thread failed is raised here; close would drop it
    except OSError as error:
        if error.filename:
            raise
        raise OSError(error.errno, error.strerror, os.fspath(Path(log_dir))) from error


ThreadHook = Callable[[threading.ExceptHookArgs], object]


class QuietEventWriterThreads:
    """A ``threading.excepthook`` that drops an ``OSError`` of tensorboard's writing thread (its
    writer raises it again to whoever writes or flushes next) and passes anything else to
    ``previous``."""

    def __init__(self, previous: ThreadHook) -> None:
        self.previous = previous

    def __call__(self, args: threading.ExceptHookArgs) -> None:
        if isinstance(args.exc_value, OSError) and type(args.thread).__name__ == WRITER_THREAD:
            return
        self.previous(args)


def quiet_event_writer_threads() -> None:
    """Install :class:`QuietEventWriterThreads` over the current ``threading.excepthook`` (once)."""
    if not isinstance(threading.excepthook, QuietEventWriterThreads):
        threading.excepthook = QuietEventWriterThreads(threading.excepthook)
