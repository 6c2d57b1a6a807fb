"""One worker's share of ``xdllm data prepare``: tokenize a chunk of a source file into a part.

A worker process loads the tokenizer once (:func:`start_worker`), then turns each
:class:`~xdllm.data.source_records.Chunk` it is given into three arrays saved under the parts
folder, in line order: the chunk's token ids (samples concatenated), each sample's length, and
(for prompt/response data) each sample's prompt length. What it skipped or cut is counted and
returned; nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xdllm.data.source_records import Chunk, RecordFormat, chunk_lines
from xdllm.data.tokenizer import load_tokenizer
from xdllm.errors import XdllmError
from xdllm.interfaces import Tokenizer

_tokenizer: Tokenizer | None = None


def start_worker(tokenizer: str) -> None:
    """Process initializer: load the tokenizer this worker encodes with."""
    global _tokenizer
    _tokenizer = load_tokenizer(tokenizer)


@dataclass(frozen=True)
class ChunkStats:
    """What one chunk held: samples and tokens written, blank lines skipped, text documents cut
    into ``max_tokens`` pieces, and tokens that are the tokenizer's unknown token."""

    index: int
    num_bytes: int
    samples: int
    tokens: int
    skipped_empty_lines: int
    cut_documents: int
    unknown_tokens: int


def part_path(parts: Path, index: int, array: str) -> Path:
    return parts / f"{index:06d}.{array}.npy"


def _encode(tokenizer: Tokenizer, text: str, where: str) -> list[int]:
    try:
        return tokenizer.encode(text)
    except ValueError as error:  # e.g. a symbol the built-in tokenizer lacks
        raise XdllmError(f"{where}: {error}") from error


def tokenize_chunk(chunk: Chunk, record_format: RecordFormat, max_tokens: int | None, dtype: str,
                   parts: Path) -> ChunkStats:
    """Tokenize every record of ``chunk`` and save its part arrays; errors name file and line.

    A text document longer than ``max_tokens`` becomes consecutive samples of at most
    ``max_tokens`` tokens (counted in ``cut_documents``); a text line that encodes to no tokens
    counts as an empty line.
    """
    if _tokenizer is None:
        raise RuntimeError("tokenize_chunk: the worker's tokenizer was not loaded (start_worker)")
    tokens: list[int] = []
    lengths: list[int] = []
    prompt_lengths: list[int] = []
    skipped = cut = 0
    for number, line in chunk_lines(chunk):
        where = f"{chunk.path}:{number}"
        record = record_format.record(line, where)
        if record is None:
            skipped += 1
            continue
        prompt_text, target_text = record
        prompt = _encode(_tokenizer, prompt_text, where) if prompt_text else []
        target = _encode(_tokenizer, target_text, where)
        if record_format.kind == "prompt_response":
            tokens += prompt + target
            lengths.append(len(prompt) + len(target))
            prompt_lengths.append(len(prompt))
        elif not target:
            skipped += 1
        else:
            step = max_tokens or len(target)
            cut += len(target) > step
            for start in range(0, len(target), step):
                piece = target[start:start + step]
                tokens += piece
                lengths.append(len(piece))
    ids = np.array(tokens, dtype=dtype)
    np.save(part_path(parts, chunk.index, "tokens"), ids)
    np.save(part_path(parts, chunk.index, "lengths"), np.array(lengths, dtype=np.int64))
    if record_format.kind == "prompt_response":
        np.save(part_path(parts, chunk.index, "prompt_lengths"), np.array(prompt_lengths, dtype=np.int64))
    unknown = getattr(_tokenizer, "unk_token_id", None)
    return ChunkStats(index=chunk.index, num_bytes=chunk.end - chunk.start, samples=len(lengths),
                      tokens=len(tokens), skipped_empty_lines=skipped, cut_documents=cut,
                      unknown_tokens=0 if unknown is None else int(np.count_nonzero(ids == unknown)))
