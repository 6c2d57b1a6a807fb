"""Telling a DataLoader worker's death apart from the error it surfaced as."""

from __future__ import annotations


def dead_worker_error(error: BaseException, num_workers: int) -> BaseException | None:
    """How a DataLoader worker's death reached the main process, if ``error`` is or was raised
    while handling it: the DataLoader's report (killed by a signal, exited unexpectedly), or a
    connection to it reset or closed in mid-transfer. The report comes from a SIGCHLD handler, so
    it interrupts whatever runs then, and code that wraps every error (``inspect`` turning one into
    "unsupported callable") can hide it behind its own: the whole chain of causes is searched."""
    if num_workers < 1:
        return None
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (ConnectionError, EOFError)) or (
                isinstance(error, RuntimeError) and str(error).startswith("DataLoader worker (pid")):
            return error
        error = error.__cause__ or error.__context__
    return None
