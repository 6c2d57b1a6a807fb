"""An input file given twice on one command line (``data/*.txt data/extra.txt``, or a link to
another input) is refused: its text would count twice."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from xdllm.errors import XdllmError


def refuse_repeated_files(paths: Sequence[str | Path], command: str, consequence: str) -> None:
    """Refuse a file of ``paths`` that is an earlier one again (by device and inode: another
    spelling, or a link, is the same file); ``consequence``: what reading it twice would do."""
    given: dict[tuple[int, int], Path] = {}
    for path in map(Path, paths):
        status = os.stat(path)
        identity = (status.st_dev, status.st_ino)
        if identity in given:
            raise XdllmError(f"{command}: input {path} is {given[identity]} given again: {consequence}; give each "
                             "file once")
        given[identity] = path
