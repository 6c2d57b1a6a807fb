"""The log handler of xdllm's own INFO lines on the terminal."""

from __future__ import annotations

import logging
import sys

from xdllm.log_marks import FILE_ONLY


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
