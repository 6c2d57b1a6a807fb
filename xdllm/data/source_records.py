"""Reading local source files for preparation: byte ranges of whole documents, and the records in them.

A file splits at document ends into independent chunks that worker processes read in parallel:

- ``text``: each line is one document (its text without the line end); with ``documents``
  ``paragraph``, lines up to a blank line are one document (its lines joined by ``\n``), and with
  ``file``, each file is one document (its blank lines inside kept);
- ``jsonl``: each line is a JSON object whose ``text_field`` (default ``text``) is a document;
- ``prompt_response``: each line is a JSON object with a ``prompt_field`` and a
  ``response_field`` (default ``prompt`` and ``response``).

Blank lines (whitespace only) outside documents are skipped and counted. Anything else that is not a record of
the format (bytes that are not UTF-8, a line that is not JSON, not an object, lacks the field or
holds a non-string there) is an :class:`~xdllm.errors.XdllmError` naming the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from xdllm.data.utf8_text import decode_utf8
from xdllm.errors import XdllmError

FORMATS = ("text", "jsonl", "prompt_response")
DOCUMENTS = ("line", "paragraph", "file")
"""What one document of ``text`` is: a line, lines up to a blank line, or a whole file."""


@dataclass(frozen=True)
class Chunk:
    """Bytes ``[start, end)`` of ``path``: whole lines, the first of them line ``first_line``."""

    index: int
    path: Path
    start: int
    end: int
    first_line: int


def plan_chunks(paths: Sequence[Path], chunk_bytes: int, documents: str = "line") -> list[Chunk]:
    """Cut each file into chunks of about ``chunk_bytes`` that end where a document ends (a
    document longer than that is one chunk), counting lines on the way: at a line end, after a
    blank line (``documents="paragraph"``), or at the file's end (``"file"``: a chunk per file)."""
    if chunk_bytes < 1:
        raise ValueError(f"plan_chunks: chunk_bytes must be >= 1, got {chunk_bytes}")
    chunks: list[Chunk] = []
    for path in paths:
        with open(path, "rb") as handle:
            start, line = 0, 1
            while block := handle.read(chunk_bytes):
                if not block.endswith(b"\n"):
                    block += handle.readline()
                if documents == "file":
                    block += handle.read()
                while documents == "paragraph" and not _ends_with_blank_line(block) and (more := handle.readline()):
                    block += more
                chunks.append(Chunk(len(chunks), path, start, start + len(block), line))
                start += len(block)
                line += block.count(b"\n")
    return chunks


def _ends_with_blank_line(block: bytes) -> bool:
    body = block.removesuffix(b"\n")
    return not body[body.rfind(b"\n") + 1:].strip()


def document_blocks(lines: Iterator[tuple[int, str]], size: int, documents: str = "line"
                    ) -> Iterator[list[tuple[int, str]]]:
    """``lines`` in blocks of about ``size`` lines that end where a document ends: a paragraph's
    block runs on to its blank line, a file's is the whole of it."""
    while block := list(islice(lines, size if documents != "file" else None)):
        if documents == "paragraph" and block[-1][1].strip():
            for line in lines:
                block.append(line)
                if not line[1].strip():
                    break
        yield block


def split_documents(lines: Sequence[tuple[int, str]], documents: str = "line") -> tuple[list[tuple[int, str]], int]:
    """The documents in ``lines`` (``(line number, text)``, whole documents) as ``(first line
    number, text)``, and how many blank lines were outside every document."""
    if documents == "line":
        kept = [(number, line) for number, line in lines if line.strip()]
        return kept, len(lines) - len(kept)
    filled = [index for index, (_, line) in enumerate(lines) if line.strip()]
    if not filled:
        return [], len(lines)
    if documents == "file":
        whole = lines[filled[0]:filled[-1] + 1]  # blank lines inside are the document's
        return [(whole[0][0], "\n".join(line for _, line in whole))], len(lines) - len(whole)
    found: list[tuple[int, str]] = []
    paragraph: list[tuple[int, str]] = []
    for number, line in [*lines, (0, "")]:  # a blank line after the last ends its paragraph
        if line.strip():
            paragraph.append((number, line))
        elif paragraph:
            found.append((paragraph[0][0], "\n".join(text for _, text in paragraph)))
            paragraph = []
    return found, len(lines) - len(filled)


def chunk_lines(chunk: Chunk) -> Iterator[tuple[int, str]]:
    """``(line number, text without its line end)`` of every line of the chunk; bytes that are
    not UTF-8 are an error naming the line and the byte."""
    with open(chunk.path, "rb") as handle:
        handle.seek(chunk.start)
        data = handle.read(chunk.end - chunk.start)
    lines = decode_utf8(data, chunk.path, chunk.start, chunk.first_line).split("\n")
    if lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=chunk.first_line):
        yield number, line.removesuffix("\r")


@dataclass(frozen=True)
class RecordFormat:
    """How a line becomes a record: ``(prompt text, target text)``, the prompt empty for text."""

    format: str = "text"
    text_field: str = "text"
    prompt_field: str = "prompt"
    response_field: str = "response"
    documents: str = "line"
    """``text``: what one document is (:data:`DOCUMENTS`)."""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise XdllmError(f"unknown data format {self.format!r}; choose one of {', '.join(FORMATS)}")
        if self.documents not in DOCUMENTS:
            raise XdllmError(f"unknown document unit {self.documents!r}; choose one of {', '.join(DOCUMENTS)}")
        if self.documents != "line" and self.format != "text":
            raise XdllmError(f"--documents {self.documents} is for --format text; in {self.format} each line is "
                             "one record")

    @property
    def kind(self) -> str:
        """What a sample is: ``text`` (a document) or ``prompt_response`` (a pair)."""
        return "prompt_response" if self.format == "prompt_response" else "text"

    def record(self, line: str, where: str) -> tuple[str, str] | None:
        """The record of one line (``where`` is ``file:line``), None for a blank line."""
        if not line.strip():
            return None
        if self.format == "text":
            return "", line
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise XdllmError(f"{where}: not valid JSON ({error.msg} at column {error.colno})") from error
        if not isinstance(value, dict):
            raise XdllmError(f"{where}: expected a JSON object, got {_json_type(value)}")
        if self.format == "jsonl":
            return "", _string_field(value, self.text_field, where)
        return (_string_field(value, self.prompt_field, where),
                _string_field(value, self.response_field, where))

    def records(self, lines: Sequence[tuple[int, str]], path: str) -> tuple[list[tuple[int, str, str]], int]:
        """``(line number, prompt text, target text)`` of each record in ``lines`` (``(line
        number, text)`` of file ``path``, whole documents): :meth:`record` of each line, without
        a call per line for text, whose documents are :meth:`split_documents`'s; and the number of
        blank lines outside the records."""
        if self.format == "text":
            found, blank = split_documents(lines, self.documents)
            return [(number, "", text) for number, text in found], blank
        parsed = [(number, self.record(line, f"{path}:{number}")) for number, line in lines]
        kept = [(number, *record) for number, record in parsed if record is not None]
        return kept, len(lines) - len(kept)


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "true/false", type(None): "null"}
    return names.get(type(value), "a number")


def _string_field(record: dict, field: str, where: str) -> str:
    if field not in record:
        present = ", ".join(repr(key) for key in list(record)[:10]) or "none"
        raise XdllmError(f"{where}: no field {field!r} (fields: {present})")
    value = record[field]
    if not isinstance(value, str):
        raise XdllmError(f"{where}: field {field!r} is {_json_type(value)}, expected a string")
    return value
