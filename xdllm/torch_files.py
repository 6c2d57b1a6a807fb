"""Files ``torch.save`` wrote (checkpoints, history files): what is wrong with one that
``torch.load`` cannot read, in the user's words rather than torch's paragraph."""

from __future__ import annotations

from pathlib import Path

from xdllm.counted import counted
from xdllm.errors import os_error_text

TORCH_ARCHIVE_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive


def why_unreadable(path: Path, error: Exception) -> str:
    """What is wrong with ``path``, which ``torch.load`` failed on with ``error``: missing, empty,
    not a torch file at all, cut short (a zip archive without its end), or else torch's own first
    sentence."""
    if not path.is_file():
        return "no such file" if not path.exists() else "not a file"
    size = path.stat().st_size
    if size == 0:
        return "an empty file, 0 bytes"
    try:
        with path.open("rb") as file:
            is_archive = file.read(len(TORCH_ARCHIVE_MAGIC)) == TORCH_ARCHIVE_MAGIC
    except OSError as unreadable:  # no permission, say
        return os_error_text(unreadable)
    if not is_archive:
        return f"not a torch file: {counted(size, 'byte')}, not a torch zip archive"
    message = " ".join(str(error).split())
    if "central directory" in message:
        return f"cut short: {size:,} bytes of a torch zip archive without its end"
    return message.split(". ")[0]
