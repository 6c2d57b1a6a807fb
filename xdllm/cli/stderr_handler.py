"""xdllm's own INFO lines on the terminal (stderr), and quiet from the libraries under it: for
the whole of an ``xdllm`` command, and for the length of a call from Python (``xdllm.train_run``)."""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from xdllm.event_files import quiet_event_writer_threads
from xdllm.log_marks import FILE_ONLY, XDLLM_LOGGERS


class StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each record, not the stream that was
    current when the handler was made (a redirected or replaced stderr keeps working)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Not the lines meant for the run's log only."""
        return not getattr(record, FILE_ONLY, False) and bool(super().filter(record))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        """Raise the error writing the line met, rather than print logging's "--- Logging error ---"
        traceback and go on: the DataLoader reports a dead worker from a signal handler, inside
        whatever runs at that moment, a write of this handler included, and would be swallowed."""
        raise  # called inside emit's ``except``: the error being handled


def quiet_library_chatter() -> None:
    """No warning spam from Lightning and torch; not Lightning's start-up chatter (accelerators
    found, a product tip), which says nothing about the run; a TensorBoard writing thread's failed
    write reported once, by the writer's caller. The warning filters hold until the
    ``warnings.catch_warnings()`` block around them ends (for good in a command)."""
    quiet_event_writer_threads()
    warnings.filterwarnings("ignore", module="lightning")
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)


def say_xdllm_lines() -> list[tuple[logging.Logger, StderrHandler, int, bool]]:
    """xdllm's INFO lines on stderr, through each of its loggers that has no handler of its own
    (one the user configured is left as it is); the loggers changed, each with the handler added
    and the level and propagation it had."""
    changed = []
    for name in XDLLM_LOGGERS:
        logger = logging.getLogger(name)
        if not logger.handlers:
            handler = StderrHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            changed.append((logger, handler, logger.level, logger.propagate))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
            logger.propagate = False
    return changed


@contextmanager
def xdllm_lines_on_stderr() -> Iterator[None]:
    """:func:`say_xdllm_lines` and :func:`quiet_library_chatter` within the block; the loggers
    and warning filters as they were after it."""
    with warnings.catch_warnings():
        quiet_library_chatter()
        changed = say_xdllm_lines()
        try:
            yield
        finally:
            for logger, handler, level, propagate in changed:
                logger.removeHandler(handler)
                logger.setLevel(level)
                logger.propagate = propagate
