"""One worker's share of ``xdllm data prepare``: tokenize a chunk of a source file into a part.

A worker process loads the tokenizer once (:func:`start_worker`), then turns each
:class:`~xdllm.data.source_records.Chunk` it is given into three arrays saved under the parts
folder, in line order: the chunk's token ids (samples concatenated), each sample's length, and
(for prompt/response data) each sample's prompt length. What it skipped or cut is counted and
returned; nothing is dropped silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np
from jaxtyping import Int64

from xdllm.data.source_records import Chunk, RecordFormat, chunk_lines, document_blocks
from xdllm.data.text_encoding import UnencodableText, encode_as_text
from xdllm.data.tokenizer import HFTokenizerFile, SymbolTokenizer, load_tokenizer
from xdllm.errors import XdllmError

BATCH_LINES = 1024
"""Lines whose records are encoded in one tokenizer call: enough that the per-call overhead
vanishes; a batch holds at most a chunk's text, so its encodings stay small."""

_tokenizer: HFTokenizerFile | SymbolTokenizer | None = None


def start_worker(tokenizer: str) -> None:
    """Process initializer: load the tokenizer this worker encodes with. The worker processes are
    the parallelism: ``tokenizers`` does not start threads of its own in them (unless
    ``TOKENIZERS_PARALLELISM`` is set)."""
    global _tokenizer
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
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


@dataclass(frozen=True)
class _Records:
    """The records of a chunk's next :data:`BATCH_LINES` lines or so (their line numbers, prompt and
    target texts), and how many of those lines were blank."""

    numbers: list[int]
    prompts: list[str]
    targets: list[str]
    blank_lines: int


def _record_batches(chunk: Chunk, record_format: RecordFormat) -> Iterator[_Records]:
    """The chunk's records, a batch per :data:`BATCH_LINES` lines (to the end of the document
    under way), in line order."""
    path = str(chunk.path)
    for block in document_blocks(chunk_lines(chunk), BATCH_LINES, record_format.documents):
        records, blank = record_format.records(block, path)
        numbers, prompts, targets = ([list(column) for column in zip(*records)] if records else ([], [], []))
        yield _Records(numbers=numbers, prompts=prompts, targets=targets, blank_lines=blank)


def _encode_records(tokenizer: HFTokenizerFile | SymbolTokenizer, batch: _Records, pairs: bool, path: Path
                    ) -> tuple[list[list[int]], list[list[int]]]:
    """The prompt ids (empty for text, and for an empty prompt) and target ids of each record, in
    one tokenizer call; an error names the file and line of the first record that fails."""
    count = len(batch.numbers)
    texts = [text for pair in zip(batch.prompts, batch.targets) for text in pair] if pairs else batch.targets
    try:  # each prompt before its response: the first text that fails is on the first line that does
        ids = encode_as_text(tokenizer, texts)
    except UnencodableText as error:  # a special token's text, a symbol the built-in tokenizer lacks
        raise XdllmError(f"{path}:{batch.numbers[error.index // 2 if pairs else error.index]}: {error}") from error
    if not pairs:
        return [[]] * count, ids
    return [prompt if text else [] for text, prompt in zip(batch.prompts, ids[0::2])], ids[1::2]


def _concatenated(ids: Iterable[list[int]], count: int, dtype: str) -> np.ndarray:
    return np.fromiter(chain.from_iterable(ids), dtype=dtype, count=count)


def _joined(arrays: list[np.ndarray], dtype: str) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)


def _lengths(ids: list[list[int]]) -> Int64[np.ndarray, " records"]:
    return np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))


def _piece_lengths(lengths: Int64[np.ndarray, " documents"], max_tokens: int | None
                   ) -> Int64[np.ndarray, " pieces"]:
    """Lengths of the consecutive pieces of at most ``max_tokens`` tokens each document becomes."""
    if max_tokens is None:
        return lengths
    counts = -(-lengths // max_tokens)
    pieces = np.full(int(counts.sum()), max_tokens, dtype=np.int64)
    pieces[np.cumsum(counts) - 1] = lengths - max_tokens * (counts - 1)
    return pieces


def tokenize_chunk(chunk: Chunk, record_format: RecordFormat, max_tokens: int | None, dtype: str,
                   parts: Path) -> ChunkStats:
    """Tokenize every record of ``chunk`` and save its part arrays; errors name file and line.

    The records of :data:`BATCH_LINES` lines are encoded in one call, each on its own (the ids
    are those of ``encode`` record by record). A text document longer than ``max_tokens`` becomes consecutive
    samples of at most ``max_tokens`` tokens (counted in ``cut_documents``); a text line that
    encodes to no tokens counts as an empty line.
    """
    if _tokenizer is None:
        raise RuntimeError("tokenize_chunk: the worker's tokenizer was not loaded (start_worker)")
    tokens: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    prompt_lengths: list[np.ndarray] = []
    skipped = cut = 0
    pairs = record_format.kind == "prompt_response"
    for batch in _record_batches(chunk, record_format):
        skipped += batch.blank_lines
        if not batch.numbers:
            continue
        prompts, targets = _encode_records(_tokenizer, batch, pairs, chunk.path)
        target_lengths = _lengths(targets)
        if pairs:
            prompt_lengths.append(_lengths(prompts))
            lengths.append(prompt_lengths[-1] + target_lengths)
            tokens.append(_concatenated(chain.from_iterable(zip(prompts, targets)), int(lengths[-1].sum()), dtype))
        else:
            documents = target_lengths[target_lengths > 0]
            skipped += len(targets) - len(documents)
            cut += int(np.count_nonzero(documents > max_tokens)) if max_tokens else 0
            lengths.append(_piece_lengths(documents, max_tokens))
            tokens.append(_concatenated(targets, int(documents.sum()), dtype))
    ids = _joined(tokens, dtype)
    np.save(part_path(parts, chunk.index, "tokens"), ids)
    np.save(part_path(parts, chunk.index, "lengths"), _joined(lengths, "int64"))
    if pairs:
        np.save(part_path(parts, chunk.index, "prompt_lengths"), _joined(prompt_lengths, "int64"))
    unknown = getattr(_tokenizer, "unk_token_id", None)
    return ChunkStats(index=chunk.index, num_bytes=chunk.end - chunk.start, samples=sum(map(len, lengths)),
                      tokens=len(ids), skipped_empty_lines=skipped, cut_documents=cut,
                      unknown_tokens=0 if unknown is None else int(np.count_nonzero(ids == unknown)))
