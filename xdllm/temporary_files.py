"""Temporary files of atomic writes: where they go, and removing the ones a killed writer left.

Every finished file xdllm writes is first written to ``.<name>.tmp-<pid>`` beside it, then
renamed over its target. A process killed mid-write leaves that temporary behind; the next
start that writes into the same folder removes it, unless its writer is still running.
"""

from __future__ import annotations

import os
from pathlib import Path

TEMPORARY_MARK = ".tmp-"


def temporary_path(path: Path) -> Path:
    """Where ``path`` is written before the rename: ``.<name>.tmp-<pid>`` beside it."""
    return path.with_name(f".{path.name}{TEMPORARY_MARK}{os.getpid()}")


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
