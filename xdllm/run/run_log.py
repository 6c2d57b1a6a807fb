"""A command's own log: ``<run>/train.log`` keeps what xdllm said while training the run,
``<generation folder>/generate.log`` what ``xdllm generate`` said while generating into it.

What a run says once (a resume's changed settings, a rewind's moved files, a best checkpoint kept
aside, the validations, how it ended) is otherwise only on the terminal that started it. Each
``xdllm train`` of a run (the first, every resume, a run of a sweep) appends to the file: a line
naming the command, then every line xdllm logs, timed, from the start of the command (held until
the run's folder is claimed: a command refused before that writes nothing), the metric lines
even where a progress bar shows them on the terminal, the result or the error it ended with::

    2026-11-28 20:41:07 xdllm train experiment=sort_mlm trainer.max_steps=400
    2026-11-28 20:41:09 step 50/400 lr-AdamW/pg1=0.0009 train/loss=0.91 (12.1 steps/s)
    ...
    2026-11-28 20:41:45 result: {"exact_match": 0.87, ...}

Only the process that launches the run writes it (not the other DDP processes). ``xdllm generate``
keeps its log the same way, in the folder of the generation (a sweep's: in the sweep's folder, a
``resume=``: appended to the stopped one's), started by the code that claims that folder
(:func:`start_generation_log`); a generation that fails having finished nothing takes its lines
back (:func:`drop_generation_log`), as it leaves nothing else. The generation after training logs
to ``train.log``. A training sweep (``xdllm train -m``) keeps ``sweep.log`` in its folder: the
sweep's own lines (each run started and finished, the ranking, how the sweep ended), each run's
lines being in that run's ``train.log``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from xdllm.config.override_text import command as shell_command
from xdllm.errors import Terminated, XdllmError
from xdllm.log_marks import STAMPED, XDLLM_LOGGERS

RUN_LOG = "train.log"
GENERATE_LOG = "generate.log"


def _stamp(seconds: float | None = None) -> str:
    """``seconds`` since the epoch (None: now) as the metric lines write the time."""
    moment = datetime.now() if seconds is None else datetime.fromtimestamp(seconds)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


class RunLog(logging.Handler):
    """Appends xdllm's log lines to ``<folder>/<file_name>`` once :meth:`start` names the folder;
    the lines before it are held until then. A write that fails (a full disk) is said once on
    stderr, and the command goes on without its log."""

    def __init__(self, command: Sequence[str], file_name: str = RUN_LOG) -> None:
        super().__init__(logging.INFO)
        self.command = shell_command(*command)
        self.file_name = file_name
        self.path: Path | None = None
        self.earlier_size: int | None = None  # of the file before this command wrote to it (None: no file)
        self.failed = False
        self.dropped = False
        self._held: list[str] = [f"{_stamp()} {self.command}"]

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {text}"
        return text if getattr(record, STAMPED, False) else f"{_stamp(record.created)} {text}"

    def emit(self, record: logging.LogRecord) -> None:
        self._write(self.format(record))

    def start(self, folder: Path) -> None:
        """Write to ``folder``'s log from now on, the held lines first (after the earlier
        commands' lines, which the file keeps)."""
        self.path = folder / self.file_name
        held, self._held = self._held, []
        self.earlier_size = self.path.stat().st_size if self.path.is_file() else None
        self._write("\n" * bool(self.earlier_size) + "\n".join(held))  # a blank line after earlier commands

    def note(self, text: str) -> None:
        """A line of the command's own (not a log record), timed."""
        self._write(f"{_stamp()} {text}")

    def _write(self, text: str) -> None:
        if self.failed or self.dropped:
            return
        if self.path is None:
            self._held.append(text)
            return
        try:
            with open(self.path, "a", encoding="utf-8") as log_file:
                log_file.write(text + "\n")
        except OSError as error:
            print(f"xdllm: could not write the log {self.path} ({error.strerror or error}): the command goes on "
                  "without it", file=sys.stderr)
            self.failed = True

    def result(self, summary: dict[str, Any] | None) -> None:
        """The figures the command printed at its end (None: it printed none, as with
        ``generate_after_train=false``)."""
        self.note(f"result: {json.dumps(summary)}" if summary is not None else "finished")


def _ending(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt):
        return f"stopped by {'SIGTERM' if isinstance(error, Terminated) else 'Ctrl-C'}"
    if isinstance(error, SystemExit):
        return f"exited with status {error.code}"
    return f"error: {error}" if isinstance(error, XdllmError) else f"error: {type(error).__name__}: {error}"


def _generation_logs() -> list[RunLog]:
    return [handler for handler in logging.getLogger(XDLLM_LOGGERS[0]).handlers
            if isinstance(handler, RunLog) and handler.file_name == GENERATE_LOG]


def start_generation_log(folder: Path) -> None:
    """Write ``xdllm generate``'s log in ``folder``, the folder it claimed, if it has not started
    in another (a sweep's, which holds the folders of its generations)."""
    for handler in _generation_logs():
        if handler.path is None:
            handler.start(folder)


def drop_generation_log(folder: Path) -> None:
    """Take ``xdllm generate``'s lines back from ``folder``'s log, a generation that finished
    nothing there being refused (it leaves nothing: the file goes, or keeps the earlier commands'
    lines alone); the log writes no more."""
    for handler in _generation_logs():
        if handler.path == folder / GENERATE_LOG:
            if handler.earlier_size is None:
                handler.path.unlink(missing_ok=True)
            else:
                os.truncate(handler.path, handler.earlier_size)
            handler.dropped = True


@contextmanager
def keeping_run_log(command: Sequence[str], file_name: str = RUN_LOG,
                    logger_names: Sequence[str] = XDLLM_LOGGERS) -> Iterator[RunLog]:
    """A :class:`RunLog` on the loggers ``logger_names`` (all of xdllm's) while the block runs
    (``command``: the words of the command that runs it; ``file_name``: its log's); an exception
    that ends the block is written to the log as it ends."""
    handler = RunLog(command, file_name)
    loggers = [logging.getLogger(name) for name in logger_names]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    except BaseException as error:
        handler.note(_ending(error))
        raise
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
