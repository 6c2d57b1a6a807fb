"""Text files as users give them: a UTF-8 byte-order mark at the start (Windows editors write
one) is not text, and bytes that are not UTF-8 are named by line and byte offset."""

from __future__ import annotations

import codecs
from pathlib import Path

from xdllm.errors import XdllmError


class NotUTF8Text(XdllmError, ValueError):
    """Bytes of a text file that are not UTF-8; the message names the file, line and byte."""


def decode_utf8(data: bytes, path: Path | str, start: int = 0, first_line: int = 1) -> str:
    """``data``, the bytes of ``path`` from byte ``start`` on (line ``first_line`` there), as text;
    a byte-order mark at the start of the file is dropped. :class:`NotUTF8Text` otherwise, e.g.
    ``corpus.txt:12: not UTF-8 text (byte 0xe9 at byte offset 407 of the file)``."""
    skip = len(codecs.BOM_UTF8) if start == 0 and data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as error:
        bad = skip + error.start
        line = first_line + data.count(b"\n", 0, bad)
        raise NotUTF8Text(f"{path}:{line}: not UTF-8 text (byte 0x{data[bad]:02x} at byte offset {start + bad} of "
                          "the file)") from None
