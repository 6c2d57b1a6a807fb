"""The on-disk layout of a denoising-history file (format ``xdllm.history.topk``, version 1).

One file holds one generation batch: every per-step tensor is stacked sample-major, so a file
is a few large tensors rather than one small file per step. The schema below is the single
source of truth for the writer, the reader's validation and ``docs/history.md``.

Dimension letters: ``B`` samples in the file, ``S`` steps recorded for the batch, ``R`` output
region length (canvas positions ``region_start .. canvas_len``), ``K`` top-k, ``P`` prompt
length, ``T`` target length, ``U`` number of token strings stored.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

FORMAT_NAME = "xdllm.history.topk"
FORMAT_VERSION = 1


class HistoryError(Exception):
    """A history file or request cannot be served (missing file, bad index, bad argument)."""


class HistoryFormatError(HistoryError, ValueError):
    """A history file is corrupt, truncated, or does not follow the documented schema."""


@dataclass(frozen=True)
class TensorField:
    """A stored tensor: its dtype, its symbolic shape and whether ``None`` is allowed."""

    dtype: torch.dtype
    dims: tuple[str, ...]
    optional: bool = False


TENSOR_FIELDS: dict[str, TensorField] = {
    "steps": TensorField(torch.int64, ("S",)),
    "sample_ids": TensorField(torch.int64, ("B",)),
    "output_start": TensorField(torch.int64, ("B",)),
    "num_steps": TensorField(torch.int64, ("B",)),
    "active": TensorField(torch.bool, ("B", "S")),
    "topk_ids": TensorField(torch.int32, ("B", "S", "R", "K")),
    "topk_probs": TensorField(torch.float16, ("B", "S", "R", "K")),
    "canvas": TensorField(torch.int32, ("B", "S", "R")),
    "committed": TensorField(torch.bool, ("B", "S", "R")),
    "initial_canvas": TensorField(torch.int32, ("B", "R")),
    "commit_step": TensorField(torch.int64, ("B", "R")),
    "confidence_at_commit": TensorField(torch.float32, ("B", "R")),
    "prompt_ids": TensorField(torch.int64, ("B", "P")),
    "prompt_mask": TensorField(torch.bool, ("B", "P")),
    "target_ids": TensorField(torch.int64, ("B", "T"), optional=True),
    "vocab_ids": TensorField(torch.int64, ("U",)),
}

# Added after version 1 was first written: files without them read as None.
OPTIONAL_TENSOR_FIELDS: dict[str, TensorField] = {
    "output_ids": TensorField(torch.int32, ("B", "R")),
    "step_confidence": TensorField(torch.float32, ("B", "S", "R")),
}

METADATA_FIELDS: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "version": int,
    "k": int,
    "region_start": int,
    "canvas_len": int,
    "mask_token_id": (int, type(None)),
    "vocab_tokens": list,
    "texts": list,
    "checksums": dict,
}

# Added after version 1 was first written; files without them read as None (target correctness
# then scores the whole target row; views infer the split from the folder).
OPTIONAL_METADATA_FIELDS: dict[str, type | tuple[type, ...]] = {
    "eos_token_id": (int, type(None)),
    "pad_token_id": (int, type(None)),
    "split": (str, type(None)),
}


def tensor_checksum(tensor: torch.Tensor) -> int:
    """CRC-32 of a tensor's bytes; torch's zip reader does not detect flipped bytes in data."""
    flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    return zlib.crc32(flat.numpy().data)


def payload_checksums(payload: Mapping[str, Any]) -> dict[str, int]:
    """Checksums of every tensor field present (``None`` optional fields are skipped)."""
    return {
        name: tensor_checksum(payload[name])
        for name in (*TENSOR_FIELDS, *OPTIONAL_TENSOR_FIELDS)
        if isinstance(payload.get(name), torch.Tensor)
    }


def validate_payload(payload: Any, path: Path | str) -> dict[str, int]:
    """Check a loaded payload against the schema; return the bound dimension sizes.

    Every problem raises :class:`HistoryFormatError` naming ``path`` and what is wrong, so a
    partly written or hand-edited file is never read as if it were complete.
    """
    where = str(path)
    if not isinstance(payload, dict):
        raise HistoryFormatError(f"{where}: expected a dict payload, got {type(payload).__name__}")
    if "state_dict" in payload and "format" not in payload:  # a Lightning checkpoint's keys
        raise HistoryFormatError(f"{where}: a training checkpoint, not a denoising-history file: those are the "
                                 "history-NNNNN.pt of a history/ folder (give the run's folder for its newest)")
    if payload.get("format") != FORMAT_NAME:
        raise HistoryFormatError(
            f"{where}: not a denoising-history file (format={payload.get('format')!r}, "
            f"expected {FORMAT_NAME!r})"
        )
    if payload.get("version") != FORMAT_VERSION:
        raise HistoryFormatError(
            f"{where}: unsupported history format version {payload.get('version')!r} "
            f"(this xdllm reads version {FORMAT_VERSION})"
        )
    missing = sorted(name for name in (*TENSOR_FIELDS, *METADATA_FIELDS) if name not in payload)
    if missing:
        raise HistoryFormatError(f"{where}: missing keys {missing}")
    present = {name: kind for name, kind in OPTIONAL_METADATA_FIELDS.items() if name in payload}
    for name, expected in {**METADATA_FIELDS, **present}.items():
        if not isinstance(payload[name], expected) or isinstance(payload[name], bool):
            raise HistoryFormatError(
                f"{where}: key {name!r} has type {type(payload[name]).__name__}, expected {expected}"
            )
    sizes = _bind_dims(payload, where)
    _check_consistency(payload, sizes, where)
    _check_checksums(payload, where)
    return sizes


def _bind_dims(payload: Mapping[str, Any], where: str) -> dict[str, int]:
    sizes: dict[str, int] = {}
    present = {name: field for name, field in OPTIONAL_TENSOR_FIELDS.items() if name in payload}
    for name, field in {**TENSOR_FIELDS, **present}.items():
        value = payload[name]
        if value is None and field.optional:
            continue
        if not isinstance(value, torch.Tensor):
            raise HistoryFormatError(
                f"{where}: key {name!r} should be a tensor, got {type(value).__name__}"
            )
        if value.dtype != field.dtype:
            raise HistoryFormatError(
                f"{where}: key {name!r} has dtype {value.dtype}, expected {field.dtype}"
            )
        if value.dim() != len(field.dims):
            raise HistoryFormatError(
                f"{where}: key {name!r} has shape {tuple(value.shape)}, expected "
                f"[{', '.join(field.dims)}]"
            )
        for dim, size in zip(field.dims, value.shape):
            if sizes.setdefault(dim, size) != size:
                raise HistoryFormatError(
                    f"{where}: inconsistent shapes: key {name!r} has {dim}={size}, "
                    f"other keys have {dim}={sizes[dim]}"
                )
    return sizes


def _check_consistency(payload: Mapping[str, Any], sizes: Mapping[str, int], where: str) -> None:
    problems = []
    if payload["k"] != sizes["K"]:
        problems.append(f"k={payload['k']} but topk_ids has K={sizes['K']}")
    if payload["canvas_len"] != payload["region_start"] + sizes["R"]:
        problems.append(
            f"canvas_len={payload['canvas_len']} != region_start={payload['region_start']} "
            f"+ region length {sizes['R']}"
        )
    if len(payload["vocab_tokens"]) != sizes["U"]:
        problems.append(f"{len(payload['vocab_tokens'])} vocab_tokens for {sizes['U']} vocab_ids")
    if not all(isinstance(t, str) for t in (*payload["texts"], *payload["vocab_tokens"])):
        problems.append("texts and vocab_tokens must hold strings only")
    if len(payload["texts"]) not in (0, sizes["B"]):
        problems.append(f"{len(payload['texts'])} texts for {sizes['B']} samples")
    output_start = payload["output_start"]
    if bool(((output_start < payload["region_start"]) | (output_start > payload["canvas_len"])).any()):
        problems.append("output_start outside [region_start, canvas_len]")
    if not torch.equal(payload["num_steps"], payload["active"].sum(dim=1)):
        problems.append("num_steps does not match the active-step counts")
    if problems:
        raise HistoryFormatError(f"{where}: inconsistent contents: " + "; ".join(problems))


def _check_checksums(payload: Mapping[str, Any], where: str) -> None:
    stored = payload["checksums"]
    actual = payload_checksums(payload)
    if set(stored) != set(actual):
        raise HistoryFormatError(
            f"{where}: checksum table lists {sorted(stored)}, file has tensors {sorted(actual)}"
        )
    bad = sorted(name for name in actual if stored[name] != actual[name])
    if bad:
        raise HistoryFormatError(f"{where}: corrupt data (checksum mismatch in {bad})")
