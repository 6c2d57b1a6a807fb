"""Temporary files of atomic writes: where they go, and removing the ones a killed writer left.

Every finished file xdllm writes is first written to ``.<name>.tmp-<pid>`` beside it, then
renamed over its target. A process killed mid-write leaves that temporary behind; the next
start that writes into the same folder removes it, unless its writer is still running.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

TEMPORARY_MARK = ".tmp-"


def temporary_path(path: Path) -> Path:
    """Where ``path`` is written before the rename: ``.<name>.tmp-<pid>`` beside it."""
    return path.with_name(f".{path.name}{TEMPORARY_MARK}{os.getpid()}")


@contextlib.contextmanager
def written_atomically(path: str | os.PathLike) -> Iterator[Path]:
    """Yields the temporary path to write ``path``'s content to; renames it over ``path`` when the
    block ends, or removes it when the block raises (``path`` then keeps its old content). An
    ``OSError`` that names no file, or the temporary one (a full disk refusing a write or the
    close after it), is raised named with ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_path(path)
    try:
        yield temporary
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        if error.filename not in (None, os.fspath(temporary)):
            raise
        raise OSError(error.errno, error.strerror, os.fspath(path)) from error
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """``path.write_text(text)``, but ``path`` is never seen half-written."""
    with written_atomically(path) as temporary:
        temporary.write_text(text)


def write_bytes_atomically(path: str | os.PathLike, data: bytes) -> None:
    """``path.write_bytes(data)``, but ``path`` is never seen half-written."""
    with written_atomically(path) as temporary:
        temporary.write_bytes(data)


def write_jsonl_atomically(path: str | os.PathLike, records: Iterable[Any]) -> None:
    """``records`` as JSON lines in ``path``, which is never seen half-written."""
    with written_atomically(path) as temporary, open(temporary, "w") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def torch_save_atomically(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to ``path``, flushed to disk before the rename: ``path`` is either the old
    file or the complete new one, even after a power cut."""
    import torch  # here: the module's other writers serve commands that never load torch

    with written_atomically(path) as temporary, open(temporary, "wb") as handle:
        try:
            torch.save(obj, handle)
        except Exception as error:  # a stop or a failed write in one of torch's writes: the zip
            hidden = _hidden_behind(error)  # writer's cleanup then fails, hiding it
            if isinstance(hidden, KeyboardInterrupt):  # Ctrl-C or SIGTERM: the stop wins
                raise hidden from None
            if isinstance(hidden, OSError):
                raise hidden from error
            raise
        handle.flush()
        os.fsync(handle.fileno())


def _hidden_behind(error: BaseException) -> BaseException | None:
    """The KeyboardInterrupt (or SIGTERM's ``Terminated``) that ``error`` was raised while handling,
    else the OSError, if any."""
    found, seen = None, error.__context__
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return seen
        if found is None and isinstance(seen, OSError):
            found = seen
        seen = seen.__context__
    return found


def writer_alive(path: Path) -> bool:
    """Whether the process that named this temporary file still runs (it may still be writing)."""
    pid = path.name.rpartition(TEMPORARY_MARK)[2]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files interrupted writes left in ``folder`` (never a finished file:
    those have no temporary mark; never one a running process may still be writing), and
    return them."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    stale = [path for path in folder.iterdir()
             if path.is_file() and path.name.startswith(".") and TEMPORARY_MARK in path.name
             and not writer_alive(path)]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale
