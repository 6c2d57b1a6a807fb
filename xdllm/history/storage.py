"""Reading and writing history files, and finding them in a run directory.

Files are plain ``torch.save`` dictionaries of tensors, strings and ints (readable with
``torch.load(path, weights_only=True)``), written atomically (temp file, fsync, ``os.replace``)
so a reader never sees a half-written file. A run keeps them under ``<run_dir>/history/``
named ``history-00000.pt``, ``history-00001.pt``, ... (one per generation batch).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from xdllm.folder_names import GENERATE_CONFIG
from xdllm.history.format import HistoryError, HistoryFormatError, payload_checksums, validate_payload
from xdllm.temporary_files import torch_save_atomically
from xdllm.torch_files import why_unreadable

HISTORY_SUBDIR = "history"
FILE_PATTERN = re.compile(r"^history-(\d{5,})\.pt$")


def history_file_name(index: int) -> str:
    """Name of the ``index``-th history file of a directory."""
    return f"history-{index:05d}.pt"


def next_file_index(directory: Path) -> int:
    """First index after every history file already in ``directory`` (0 when there is none).

    A recorder starts numbering there, so a second generation into the same directory adds
    files instead of overwriting the first one's.
    """
    return max(_numbered_files(directory), default=-1) + 1


def remove_files_from(directory: Path, first: int) -> None:
    """Delete the history files numbered ``first`` and on in ``directory``."""
    for index, path in _numbered_files(directory).items():
        if index >= first:
            path.unlink(missing_ok=True)


def _numbered_files(directory: Path) -> dict[int, Path]:
    """The history files directly in ``directory``, by number (none if it does not exist)."""
    if not directory.is_dir():
        return {}
    return {int(m.group(1)): p for p in directory.iterdir() if (m := FILE_PATTERN.match(p.name))}


def write_history_file(payload: Mapping[str, Any], path: Path) -> None:
    """Validate ``payload`` (adding its checksums) and write it atomically to ``path``."""
    record = dict(payload)
    record["checksums"] = payload_checksums(record)
    validate_payload(record, path)
    torch_save_atomically(record, path)


def read_history_file(path: Path | str) -> dict[str, Any]:
    """Load and fully validate one history file.

    Raises :class:`HistoryError` when the file does not exist and :class:`HistoryFormatError`
    when it is truncated, garbled or does not follow the schema; both name the file.
    """
    path = Path(path)
    if not path.is_file():
        raise HistoryError(f"{path}: no such history file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # any failure to unpickle means the file is unusable
        raise HistoryFormatError(f"{path}: cannot be read as a history file ({why_unreadable(path, error)}); "
                                 "history files are the history-NNNNN.pt that generate history=topk and "
                                 "validation write") from error
    validate_payload(payload, path)
    return payload


def find_history_files(path: Path | str) -> list[Path]:
    """History files for a file, a history directory, or a run directory (``<run>/history``),
    searched recursively (a run keeps ``history/val-step<N>/`` folders, generation keeps
    ``generate/<time>/history/``).

    Files are ordered by folder, then index. A path with no history files is a
    :class:`HistoryError`.
    """
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise HistoryError(f"{path}: no such file or directory")
    found = sorted(
        (p.parent, int(m.group(1)), p) for p in path.rglob("history-*.pt")
        if (m := FILE_PATTERN.match(p.name))
    )
    if not found:
        raise HistoryError(f"{path}: no history files (history-NNNNN.pt) found under it{_why_none(path)}")
    return [p for _, _, p in found]


def _why_none(folder: Path) -> str:
    """Why ``folder`` holds no history: the generations in it (their ``generate.yaml``) ran without it."""
    generations = sum(1 for _ in folder.rglob(GENERATE_CONFIG))
    if not generations:
        return ""
    which = "its generation" if generations == 1 else f"its {generations} generations"
    return f": {which} ran without history (xdllm generate records it with history=topk)"


def history_folders(path: Path | str) -> list[Path]:
    """Folders under ``path`` (itself included) that directly hold history files, one per
    generation (``history/val-step<N>/``, ``generate/<name>/history/``), oldest first: ordered
    by the modification time of each folder's newest file, then by path.

    A path with no history files is a :class:`HistoryError`.
    """
    newest: dict[Path, float] = {}
    for file in find_history_files(path):
        newest[file.parent] = max(newest.get(file.parent, 0.0), file.stat().st_mtime)
    return sorted(newest, key=lambda folder: (newest[folder], str(folder)))
