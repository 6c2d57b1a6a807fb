"""What xdllm names in a run's checkpoints: the files of its ``checkpoints`` folder and the keys
it adds to a checkpoint, for training to write and generation to read (without Lightning)."""

from __future__ import annotations

LAST_NAME = "last.ckpt"
"""The newest training state (:class:`xdllm.train.latest_checkpoint.LatestCheckpoint`)."""

FROZEN_SOURCES_KEY = "xdllm_frozen_sources"
"""Where a checkpoint records each frozen model's source: its checkpoint file, step and family."""


def step_checkpoint_name(step: int) -> str:
    """The file kept at optimizer step ``step`` (``checkpoint.save_every_n_steps``)."""
    return f"step{step:07d}.ckpt"
