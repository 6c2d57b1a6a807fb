"""``xdllm data prepare``: tokenize local files once into a prepared dataset that training maps.

1. The sources are cut into chunks of whole documents (:func:`~xdllm.data.source_records.plan_chunks`)
   and tokenized by ``workers`` processes (:mod:`xdllm.data.prepare_worker`), each chunk into a
   part, with a progress bar over the bytes.
2. Held-out samples are chosen once, here: ``round(n * fraction)`` of the ``n`` samples for
   validation and for test (at least one each when the fraction is above 0), drawn without
   replacement by a generator seeded with ``seed``. Training never sees them; every later run
   uses the same ones.
3. The parts are copied, in source order, into each split's arrays
   (:mod:`xdllm.data.prepared_store`), and the manifest is written last, with the tokenizer's
   fingerprint.

Everything is written into a temporary folder beside the output and renamed into place at the
end, so a prepared dataset is either whole or absent; a failure removes the temporary folder,
and the next preparation of the same output removes one that a killed process left.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timezone
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path
from typing import Any

import numpy as np
from jaxtyping import Bool, Int, Int8
from tqdm import tqdm

from xdllm.data.prepare_worker import ChunkStats, part_path, start_worker, tokenize_chunk
from xdllm.data.prepared_store import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    SPLITS,
    array_path,
    token_dtype,
)
from xdllm.data.repeated_inputs import refuse_repeated_files
from xdllm.data.source_records import Chunk, RecordFormat, plan_chunks
from xdllm.data.tokenizer import load_tokenizer
from xdllm.errors import XdllmError
from xdllm.temporary_files import TEMPORARY_MARK, temporary_path, writer_alive

CHUNK_BYTES = 1 << 20
"""Source bytes per chunk: small enough for an even spread over workers (the last chunks keep
one worker busy while the others wait), a smooth progress bar and a small bound on a worker's
memory (a chunk's ids and one batch of encodings), large enough that per-chunk overhead (a few
milliseconds) is negligible."""


@dataclass(frozen=True)
class PrepareOptions:
    inputs: Sequence[Path]
    output: Path
    tokenizer: str
    record_format: RecordFormat = field(default_factory=RecordFormat)
    workers: int = 2
    val_fraction: float = 0.01
    test_fraction: float = 0.01
    seed: int = 0
    max_tokens: int | None = None
    chunk_bytes: int = CHUNK_BYTES

    def check(self) -> None:
        if not self.inputs:
            raise XdllmError("data prepare: no input files given")
        for path in self.inputs:
            if not Path(path).is_file():
                raise XdllmError(f"data prepare: input {path} is not a file")
        refuse_repeated_files(self.inputs, "data prepare", "its documents would be prepared twice, and a held-out "
                              "copy of one would be trained on too")
        if self.workers < 1:
            raise XdllmError(f"data prepare: --workers must be >= 1, got {self.workers}")
        for name, value in (("--val-fraction", self.val_fraction), ("--test-fraction", self.test_fraction)):
            if not 0.0 <= value < 1.0:
                raise XdllmError(f"data prepare: {name} must be in [0, 1), got {value}")
        if self.val_fraction + self.test_fraction >= 1.0:
            raise XdllmError("data prepare: --val-fraction plus --test-fraction must be below 1, got "
                             f"{self.val_fraction} + {self.test_fraction}")
        if self.seed < 0:
            raise XdllmError(f"data prepare: --seed must be >= 0, got {self.seed}")
        if self.max_tokens is not None:
            if self.max_tokens < 1:
                raise XdllmError(f"data prepare: --max-tokens must be >= 1, got {self.max_tokens}")
            if self.record_format.kind == "prompt_response":
                raise XdllmError("data prepare: --max-tokens cuts text documents; prompt/response pairs "
                                 "are never cut")
        if self.output.exists():
            raise XdllmError(f"data prepare: output {self.output} already exists; choose another -o or "
                             "remove it")


def held_out_counts(total: int, val_fraction: float, test_fraction: float) -> tuple[int, int]:
    """Validation and test sizes: ``round(total * fraction)``, at least 1 for a fraction above 0;
    the training split must keep at least one sample."""
    counts = [max(1, round(total * fraction)) if fraction > 0 else 0 for fraction in (val_fraction, test_fraction)]
    if total - sum(counts) < 1:
        raise XdllmError(f"data prepare: {total} samples leave none for training after {counts[0]} for "
                         f"validation and {counts[1]} for test; lower the fractions or add data")
    return counts[0], counts[1]


def choose_held_out(total: int, num_val: int, num_test: int, seed: int
                    ) -> tuple[Int[np.ndarray, " num_val"], Int[np.ndarray, " num_test"]]:
    """Sorted sample indices of the validation and test splits, drawn without replacement."""
    chosen = np.random.default_rng(seed).choice(total, size=num_val + num_test, replace=False)
    return np.sort(chosen[:num_val]), np.sort(chosen[num_val:])


def _members(index: Int[np.ndarray, " count"], chosen: Int[np.ndarray, " chosen"]) -> Bool[np.ndarray, " count"]:
    position = np.searchsorted(chosen, index)
    return (position < len(chosen)) & (chosen[np.minimum(position, len(chosen) - 1)] == index)


def split_labels(first: int, count: int, validation: Int[np.ndarray, " num_val"],
                 test: Int[np.ndarray, " num_test"]) -> Int8[np.ndarray, " count"]:
    """Split of samples ``[first, first + count)``: 0 train, 1 validation, 2 test."""
    index = np.arange(first, first + count)
    labels = np.zeros(count, dtype=np.int8)
    if len(validation):
        labels[_members(index, validation)] = 1
    if len(test):
        labels[_members(index, test)] = 2
    return labels


def _tokenize(chunks: list[Chunk], options: PrepareOptions, dtype: str, parts: Path) -> list[ChunkStats]:
    stats: list[ChunkStats] = []
    total_bytes = sum(chunk.end - chunk.start for chunk in chunks)
    # fork: workers inherit the loaded modules instead of importing torch and lightning again.
    context = get_context("fork" if "fork" in get_all_start_methods() else "spawn")
    with ProcessPoolExecutor(max(1, min(options.workers, len(chunks))), mp_context=context, initializer=start_worker,
                             initargs=(options.tokenizer,)) as pool, \
            tqdm(total=total_bytes, unit="B", unit_scale=True, desc="tokenizing", disable=None) as bar:
        futures = [pool.submit(tokenize_chunk, chunk, options.record_format, options.max_tokens, dtype, parts)
                   for chunk in chunks]
        try:
            for future in as_completed(futures):
                stats.append(future.result())
                bar.update(stats[-1].num_bytes)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return sorted(stats, key=lambda chunk: chunk.index)


def _write_splits(folder: Path, parts: Path, stats: list[ChunkStats], validation: Int[np.ndarray, " num_val"],
                  test: Int[np.ndarray, " num_test"], dtype: str, kind: str) -> dict[str, dict[str, int]]:
    """Copy the parts into each split's arrays, in source order; return each split's counts."""
    firsts = np.cumsum([0] + [chunk.samples for chunk in stats])
    info = {split: {"samples": 0, "tokens": 0, "longest_prompt": 0, "longest_target": 0} for split in SPLITS}

    def load(chunk: ChunkStats) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lengths = np.load(part_path(parts, chunk.index, "lengths"))
        prompts = (np.load(part_path(parts, chunk.index, "prompt_lengths")) if kind == "prompt_response"
                   else np.zeros_like(lengths))
        return lengths, prompts, split_labels(int(firsts[chunk.index]), chunk.samples, validation, test)

    for chunk in stats:  # first pass: sizes
        lengths, prompts, labels = load(chunk)
        for label, split in enumerate(SPLITS):
            chosen = labels == label
            if chosen.any():
                counts = info[split]
                counts["samples"] += int(chosen.sum())
                counts["tokens"] += int(lengths[chosen].sum())
                counts["longest_prompt"] = max(counts["longest_prompt"], int(prompts[chosen].max()))
                counts["longest_target"] = max(counts["longest_target"],
                                               int((lengths[chosen] - prompts[chosen]).max()))

    def create(split: str, array: str, array_dtype: Any, length: int) -> np.memmap:
        return np.lib.format.open_memmap(array_path(folder, split, array), mode="w+", dtype=array_dtype,
                                         shape=(length,))

    outputs = {split: {"tokens": create(split, "tokens", dtype, info[split]["tokens"]),
                       "offsets": create(split, "offsets", np.int64, info[split]["samples"] + 1)}
               for split in SPLITS}
    if kind == "prompt_response":
        for split in SPLITS:
            outputs[split]["prompt_lengths"] = create(split, "prompt_lengths", np.int64, info[split]["samples"])
    cursors = {split: [0, 0] for split in SPLITS}  # samples, tokens written
    for chunk in stats:  # second pass: copy
        lengths, prompts, labels = load(chunk)
        tokens = np.load(part_path(parts, chunk.index, "tokens"))
        token_labels = np.repeat(labels, lengths)
        for label, split in enumerate(SPLITS):
            chosen = labels == label
            samples, written = cursors[split]
            count, length = int(chosen.sum()), int(lengths[chosen].sum())
            arrays = outputs[split]
            arrays["tokens"][written:written + length] = tokens[token_labels == label]
            arrays["offsets"][samples + 1:samples + 1 + count] = written + np.cumsum(lengths[chosen])
            if kind == "prompt_response":
                arrays["prompt_lengths"][samples:samples + count] = prompts[chosen]
            cursors[split] = [samples + count, written + length]
    for arrays in outputs.values():
        arrays["offsets"][0] = 0
        for array in arrays.values():
            array.flush()
    return info


def _manifest(options: PrepareOptions, tokenizer: Any, dtype: str, splits: dict, totals: dict) -> dict:
    record_format = options.record_format
    source = options.tokenizer if options.tokenizer == "builtin" else str(Path(options.tokenizer).resolve())
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "kind": record_format.kind,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tokenizer": {"source": source, "fingerprint": tokenizer.fingerprint, "vocab_size": tokenizer.vocab_size},
        "token_dtype": dtype,
        "sources": [{"path": str(Path(path).resolve()), "bytes": Path(path).stat().st_size}
                    for path in options.inputs],
        "options": {"format": record_format.format, "documents": record_format.documents,
                    "text_field": record_format.text_field,
                    "prompt_field": record_format.prompt_field, "response_field": record_format.response_field,
                    "max_tokens": options.max_tokens, "seed": options.seed,
                    "val_fraction": options.val_fraction, "test_fraction": options.test_fraction},
        "splits": splits,
        **totals,
    }


def remove_abandoned_folders(output: Path) -> list[Path]:
    """Remove the temporary folders that killed preparations of ``output`` left beside it
    (``.<name>.tmp-<pid>`` whose process is gone); return them."""
    abandoned = [folder for folder in output.parent.glob(f".{output.name}{TEMPORARY_MARK}*")
                 if folder.is_dir() and not writer_alive(folder)]
    for folder in abandoned:
        shutil.rmtree(folder, ignore_errors=True)
    return abandoned


def prepare(options: PrepareOptions) -> dict[str, Any]:
    """Prepare ``options.inputs`` into ``options.output``; return a summary of what was written."""
    options.check()
    started = time.perf_counter()
    try:
        tokenizer = load_tokenizer(options.tokenizer)
    except (ValueError, FileNotFoundError) as error:
        raise XdllmError(f"data prepare: {error}") from error
    dtype = token_dtype(tokenizer.vocab_size).name
    chunks = plan_chunks([Path(path) for path in options.inputs], options.chunk_bytes, options.record_format.documents)
    output = options.output
    output.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_folders(output)
    folder = temporary_path(output)
    parts = folder / "parts"
    parts.mkdir(parents=True)
    try:
        stats = _tokenize(chunks, options, dtype, parts)
        total = sum(chunk.samples for chunk in stats)
        totals = {"skipped_empty_lines": sum(chunk.skipped_empty_lines for chunk in stats),
                  "cut_documents": sum(chunk.cut_documents for chunk in stats),
                  "unknown_tokens": sum(chunk.unknown_tokens for chunk in stats)}
        if total == 0:
            names = ", ".join(str(path) for path in options.inputs)
            raise XdllmError(f"data prepare: {names} holds no samples ({totals['skipped_empty_lines']} empty "
                             "lines skipped)")
        validation, test = choose_held_out(total, *held_out_counts(total, options.val_fraction,
                                                                   options.test_fraction), options.seed)
        splits = _write_splits(folder, parts, stats, validation, test, dtype, options.record_format.kind)
        shutil.rmtree(parts)
        manifest = _manifest(options, tokenizer, dtype, splits, totals)
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        os.rename(folder, output)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    seconds = time.perf_counter() - started
    num_bytes = sum(chunk.num_bytes for chunk in stats)
    return {"output": str(output), "kind": manifest["kind"],
            "samples": {split: splits[split]["samples"] for split in SPLITS},
            "tokens": {split: splits[split]["tokens"] for split in SPLITS},
            **totals, "source_bytes": num_bytes, "seconds": round(seconds, 3),
            "mb_per_second": round(num_bytes / 1e6 / max(seconds, 1e-9), 3), "workers": options.workers}
