"""Lightning's checkpoint IO for training: the atomic, digest-carrying checkpoint files of
:mod:`xdllm.train.checkpoint_io`."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.plugins.io import TorchCheckpointIO

from xdllm.train.checkpoint_io import read_checkpoint_file, save_checkpoint_file


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO: digest-carrying atomic saves, digest-checked loads (resume)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError(f"AtomicCheckpointIO takes no storage_options, got {storage_options!r}")
        save_checkpoint_file(checkpoint, path)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict[str, Any]:
        return read_checkpoint_file(path, map_location if map_location is not None else "cpu")
