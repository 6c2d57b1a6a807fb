"""The on-disk layout of a prepared dataset, and its memory-mapped reader.

A prepared dataset is a folder (written by :mod:`xdllm.data.prepare`)::

    manifest.json                     what it holds: kind, tokenizer fingerprint, splits, counts
    <split>.tokens.npy                the split's token ids, samples concatenated (uint16 or uint32)
    <split>.offsets.npy               int64 [samples + 1]: sample i is tokens[offsets[i]:offsets[i+1]]
    <split>.prompt_lengths.npy        int64 [samples], prompt_response only: the first
                                      prompt_lengths[i] tokens of sample i are its prompt, the
                                      rest its response

for each split of ``train``, ``validation`` and ``test``. The arrays are opened with
``numpy.load(mmap_mode="r")``: nothing is read until a sample is, so the memory a reader holds
does not grow with the corpus (see docs/data.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_NAME = "xdllm-prepared-data"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SPLITS = ("train", "validation", "test")
KINDS = ("text", "prompt_response")


def array_path(folder: Path, split: str, array: str) -> Path:
    """``<folder>/<split>.<array>.npy``."""
    return folder / f"{split}.{array}.npy"


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned type that holds every token id: uint16 up to 65,536 tokens."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The manifest of a prepared dataset; a missing or unreadable one is a ``ValueError``
    naming the folder."""
    folder = Path(folder).expanduser()
    path = folder / MANIFEST
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"prepared data {folder} is a file, not the folder `xdllm data prepare` makes")
    if not folder.is_dir():
        raise ValueError(f"prepared data {folder} does not exist (make it with `xdllm data prepare`)")
    if not path.is_file():
        raise ValueError(f"{folder} is not a prepared dataset: it has no {MANIFEST} "
                         "(make one with `xdllm data prepare`)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not a readable manifest ({error})") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise ValueError(f"{path} is not the manifest of an xdllm prepared dataset")
    if manifest.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path} has format version {manifest.get('version')}; this xdllm reads "
                         f"version {FORMAT_VERSION}: prepare the data again")
    if manifest.get("kind") not in KINDS:
        raise ValueError(f"{path}: unknown kind {manifest.get('kind')!r}; expected one of {', '.join(KINDS)}")
    return manifest


def _load(path: Path) -> np.ndarray:
    if not path.is_file():
        raise ValueError(f"prepared data: {path} is missing")
    try:
        return np.load(path, mmap_mode="r")
    except ValueError as error:
        raise ValueError(f"prepared data: {path} is not a readable .npy array ({error})") from error


class PreparedSplit:
    """One split of a prepared dataset, memory-mapped: ``split.sample(i)`` is
    ``(prompt ids, target ids)`` (the prompt empty for text)."""

    def __init__(self, folder: Path, split: str, kind: str, samples: int, tokens: int) -> None:
        self.name = split
        self.tokens = _load(array_path(folder, split, "tokens"))
        self.offsets = _load(array_path(folder, split, "offsets"))
        self.prompt_lengths = (_load(array_path(folder, split, "prompt_lengths"))
                               if kind == "prompt_response" else None)
        where = f"prepared data {folder}, split {split}"
        if self.offsets.shape != (samples + 1,) or self.tokens.shape != (tokens,):
            raise ValueError(f"{where}: arrays hold {self.offsets.shape[0] - 1} samples of "
                             f"{self.tokens.shape[0]} tokens, the manifest says {samples} of {tokens}: "
                             "the folder is damaged; prepare it again")
        if self.prompt_lengths is not None and self.prompt_lengths.shape != (samples,):
            raise ValueError(f"{where}: {self.prompt_lengths.shape[0]} prompt lengths for {samples} "
                             "samples: the folder is damaged; prepare it again")

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    def sample(self, index: int) -> tuple[list[int], list[int]]:
        if not 0 <= index < len(self):
            raise IndexError(f"split {self.name!r} has {len(self)} samples, no sample {index}")
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        ids = self.tokens[start:end].tolist()
        prompt_length = 0 if self.prompt_lengths is None else int(self.prompt_lengths[index])
        return ids[:prompt_length], ids[prompt_length:]


class PreparedData:
    """A prepared dataset: its manifest, and its splits opened (memory-mapped) on first use.

    Pickling keeps only the folder and the manifest, so DataLoader worker processes map the
    files themselves instead of receiving copies of them.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder).expanduser().resolve()
        self.manifest = read_manifest(self.folder)
        self._splits: dict[str, PreparedSplit] = {}

    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    def split_info(self, split: str) -> dict[str, int]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        return self.manifest["splits"][split]

    def split(self, split: str) -> PreparedSplit:
        if split not in self._splits:
            info = self.split_info(split)
            self._splits[split] = PreparedSplit(self.folder, split, self.kind, info["samples"], info["tokens"])
        return self._splits[split]

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder, "manifest": self.manifest, "_splits": {}}
