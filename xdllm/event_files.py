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
import time
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


EVENT_FILE_PREFIX = "events.out.tfevents."
MOST_WAITED = 2.0
"""Seconds :func:`after_the_event_files_in` waits at most."""


def after_the_event_files_in(folder: str | os.PathLike) -> None:
    """Wait, if need be, until a second later than the newest event file's in ``folder``.

    TensorBoard reads a folder's event files in the order of their names, which start with the
    second each was made (``events.out.tfevents.<seconds>.<host>.<pid>.<n>``) and go on with a
    counter that is compared as text (``.10`` before ``.9``). A resumed run's file made in the
    same second as the file before it (a short run resumed at once, from Python, say) could be read
    first, and its purge of the steps the run redoes would then miss them: both attempts' values
    shown. One made in a later second is read after. The wait is under a second, and only then
    (a file stamped further ahead, from a clock set back since, is not waited for)."""
    stamps = [int(stamp) for path in Path(folder).glob(f"{EVENT_FILE_PREFIX}*")
              if (stamp := path.name[len(EVENT_FILE_PREFIX):].split(".")[0]).isdigit()]
    wait = max(stamps, default=0) + 1 - time.time()
    if 0 < wait <= MOST_WAITED:
        time.sleep(wait)
