"""A new folder named by the time a command started, its own even when another command started
in the same second; one the command then leaves empty, failing before it writes there, is
removed with the folders made for it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def make_new_folder(parent: Path, name: str) -> Path:
    """``parent/name`` made now with an exclusive ``mkdir`` (its parents too), or ``name-2``,
    ``name-3``, ... where another process made it first."""
    for attempt in itertools.count(1):
        folder = parent / (name if attempt == 1 else f"{name}-{attempt}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise AssertionError("unreachable: itertools.count never ends")


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
