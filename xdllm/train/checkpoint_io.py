"""Checkpoint files that a crash cannot corrupt and that say when they were corrupted.

Writes go to a temporary file in the target folder, then ``os.replace``: the path holds either
the old file or the complete new one. Every checkpoint carries a digest of its whole content
(every tensor's bytes, dtype and shape, and every other value), checked on every read: a file
whose bytes changed after it was written is refused with its path named, never loaded.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from xdllm.errors import XdllmError
from xdllm.history.format import FORMAT_NAME as HISTORY_FORMAT
from xdllm.temporary_files import torch_save_atomically
from xdllm.torch_files import why_unreadable

DIGEST_KEY = "xdllm_digest"


class CheckpointError(XdllmError):
    """A checkpoint file that cannot be read, or whose content is not what was written."""


def _feed(hasher: Any, value: Any) -> None:
    """Hash ``value`` canonically: mappings by sorted key, sequences in order, tensors by bytes."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu").contiguous().reshape(-1)
        hasher.update(f"tensor:{tensor.dtype}:{tuple(value.shape)}:".encode())
        hasher.update(tensor.view(torch.uint8).numpy())
    elif isinstance(value, Mapping):
        hasher.update(f"map:{len(value)}:".encode())
        for key in sorted(value, key=repr):
            hasher.update(f"{key!r}=".encode())
            _feed(hasher, value[key])
    elif isinstance(value, (list, tuple)):
        hasher.update(f"{type(value).__name__}:{len(value)}:".encode())
        for item in value:
            _feed(hasher, item)
    else:
        hasher.update(f"{type(value).__name__}:{value!r};".encode())


def content_digest(checkpoint: Mapping[str, Any]) -> str:
    """BLAKE2b of everything in ``checkpoint`` except the digest itself."""
    hasher = hashlib.blake2b(digest_size=32)
    _feed(hasher, {key: value for key, value in checkpoint.items() if key != DIGEST_KEY})
    return hasher.hexdigest()


def save_checkpoint_file(checkpoint: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write ``checkpoint`` with its content digest, atomically."""
    torch_save_atomically({**checkpoint, DIGEST_KEY: content_digest(checkpoint)}, path)


def read_checkpoint_file(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """Load a checkpoint and check its digest; :class:`CheckpointError` names the file otherwise."""
    path = Path(path)
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as error:
        raise CheckpointError(f"could not read checkpoint {path}: {why_unreadable(path, error)}") from error
    if isinstance(checkpoint, dict) and checkpoint.get("format") == HISTORY_FORMAT:
        raise CheckpointError(f"{path} is a denoising-history file, not a checkpoint: give the run's folder or one "
                              "of its checkpoints/*.ckpt")
    if not isinstance(checkpoint, dict) or DIGEST_KEY not in checkpoint:
        raise CheckpointError(f"{path} has no content digest: not a checkpoint written by this "
                              "version of xdllm")
    if content_digest(checkpoint) != checkpoint[DIGEST_KEY]:
        raise CheckpointError(f"checkpoint {path} is corrupt: its content does not match the digest "
                              "written with it")
    return checkpoint
