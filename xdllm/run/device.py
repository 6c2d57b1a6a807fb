"""Where `xdllm generate` / `xdllm eval` run: the device, and the autocast dtype of the run.

``device=auto`` picks CUDA when torch can use it, else the CPU; ``device=cuda`` on a machine
without CUDA is one clear error. On CUDA a model trained in reduced precision
(``trainer.precision`` ``bf16-mixed``, ``bf16-true``, ``16-mixed``, ...) runs under autocast to
that dtype, as it trained; on the CPU, and for a model trained in 32-bit, nothing is cast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from xdllm.errors import XdllmError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(requested: Any) -> torch.device:
    """The device for a requested ``auto | cpu | cuda``."""
    if requested not in DEVICE_CHOICES:
        raise XdllmError(f"device must be one of {', '.join(DEVICE_CHOICES)}, got {requested!r}")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise XdllmError("device=cuda but torch sees no CUDA device on this machine "
                         f"(torch {torch.__version__}); use device=cpu or device=auto")
    return torch.device(requested)


def autocast_dtype(precision: Any, device: torch.device) -> torch.dtype | None:
    """The dtype a model trained with Lightning ``precision`` runs in on ``device`` (None: no
    autocast): bfloat16 for ``bf16*``, float16 for ``16*``, on CUDA only."""
    if device.type != "cuda":
        return None
    name = str(precision)
    if name.startswith("bf16"):
        return torch.bfloat16
    if name.startswith("16"):
        return torch.float16
    return None


@contextlib.contextmanager
def autocast(device: torch.device, dtype: torch.dtype | None) -> Iterator[None]:
    """``torch.autocast`` to ``dtype`` on ``device``; nothing when ``dtype`` is None."""
    if dtype is None:
        yield
        return
    with torch.autocast(device.type, dtype=dtype):
        yield


def batch_to(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """The batch with every tensor on ``device`` (copied without waiting where it can be);
    other entries as they are."""
    return {key: value.to(device, non_blocking=True) if isinstance(value, torch.Tensor) else value
            for key, value in batch.items()}
