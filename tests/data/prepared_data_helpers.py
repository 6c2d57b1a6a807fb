"""Small prepared datasets for tests, made with the built-in tokenizer."""

from __future__ import annotations

from pathlib import Path

import torch

from xdllm.data.prepare import PrepareOptions, prepare

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def distinct_documents(count: int) -> list[str]:
    """``count`` (< 1000) different documents of 3-6 built-in symbols: the digits of their
    number, then 0-3 letters."""
    return [" ".join([*f"{i:03d}", *(LETTERS[(i + j) % 26] for j in range(i % 4))]) for i in range(count)]


def prepare_documents(folder: Path, count: int, val_fraction: float = 0.1, test_fraction: float = 0.1,
                      workers: int = 1) -> list[str]:
    """Prepare ``count`` distinct text documents into ``folder``; return them."""
    documents = distinct_documents(count)
    source = folder.with_suffix(".txt")
    source.write_text("\n".join(documents) + "\n")
    prepare(PrepareOptions(inputs=[source], output=folder, tokenizer="builtin", workers=workers,
                           val_fraction=val_fraction, test_fraction=test_fraction))
    return documents


def documents_of(examples) -> dict:
    """A collator that keeps what a test checks: each example's target ids and its position."""
    return {"documents": [tuple(example["target_ids"]) for example in examples],
            "sample_index": torch.tensor([example["sample_index"] for example in examples])}
