"""A new folder named by the time a command started, its own even when another command started
in the same second."""

from __future__ import annotations

import itertools
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
