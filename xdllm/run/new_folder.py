"""A new folder named by the time a command started, its own even when another command started
in the same second; one the command then leaves empty, failing before it writes there, is
removed with the folders made for it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path


def time_stamp() -> str:
    """Now as a folder name: ``20261129-023124``."""
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def make_new_folder(parent: Path, name: str) -> Path:
    """``parent/name`` made now with an exclusive ``mkdir`` (its parents too), or ``name-2``,
    ``name-3``, ... where another process made it first."""
    folder, attempt = parent / name, 1
    while True:
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            attempt += 1
            folder = parent / f"{name}-{attempt}"


@contextmanager
def new_folder(parent: Path, name: str) -> Iterator[Path]:
    """:func:`make_new_folder` for the block; when the block fails, the folder and the parents
    made for it are removed where they are empty (one another command wrote into stays)."""
    missing = [folder for folder in (parent, *parent.parents) if not folder.exists()]
    made = make_new_folder(parent, name)
    try:
        yield made
    except BaseException:
        for folder in (made, *missing):  # innermost first
            try:
                folder.rmdir()
            except OSError:  # not empty, or gone
                break
        raise
