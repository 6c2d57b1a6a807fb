"""Where a run's checkpoints are and what one holds: its config and its model's weights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from xdllm.errors import XdllmError
from xdllm.registry import discover_families
from xdllm.train.checkpoint_io import CheckpointError, read_checkpoint_file
from xdllm.train.checkpoint_layout import LAST_NAME
from xdllm.train.weight_average import CHECKPOINT_KEY as AVERAGE_KEY
from xdllm.train.weight_average import averaged_state_dict

CHECKPOINT_DIR = "checkpoints"
CONFIG_KEY = "xdllm_config"
MODEL_PREFIX = "model."


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint to generate or evaluate from: a file as given, or a run directory's
    ``best.ckpt`` (else its ``last.ckpt``); its ``checkpoints`` folder given stands for it."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        folder = path if path.name == CHECKPOINT_DIR else path / CHECKPOINT_DIR
        for candidate in (folder / name for name in ("best.ckpt", LAST_NAME)):
            if candidate.is_file():
                return candidate
        runs = sorted(child.name for child in path.iterdir() if any((child / CHECKPOINT_DIR).glob("*.ckpt")))
        if runs:  # a folder of runs: a training sweep's, or runs/
            shown = ", ".join(runs[:3]) + (f" and {len(runs) - 3} more" if len(runs) > 3 else "")
            raise XdllmError(f"{path} is not a run directory but holds runs ({shown}): give one of them, e.g. "
                             f"{path / runs[0]}")
        raise XdllmError(f"no checkpoint in run directory {path} (looked for "
                         f"{CHECKPOINT_DIR}/best.ckpt and {CHECKPOINT_DIR}/{LAST_NAME})")
    raise XdllmError(f"checkpoint not found: {path}")


def run_dir_of(checkpoint: Path) -> Path:
    """The run directory a checkpoint belongs to (``<run>/checkpoints/x.ckpt`` -> ``<run>``)."""
    parent = checkpoint.resolve().parent
    return parent.parent if parent.name == CHECKPOINT_DIR else parent


@dataclass(frozen=True)
class RunCheckpoint:
    """A checkpoint file read: where it is, its whole content and its run's config (with the
    folders of the run's ``model_search_path`` searched for model families)."""

    path: Path
    content: dict[str, Any]
    config: DictConfig

    @property
    def global_step(self) -> int:
        return int(self.content.get("global_step", 0))

    def model_weights(self, ema: bool = True) -> dict[str, torch.Tensor]:
        """The model's state dict: its moving average where the checkpoint has one and ``ema``,
        else the trained weights."""
        state = {key.removeprefix(MODEL_PREFIX): value for key, value in self.content["state_dict"].items()
                 if key.startswith(MODEL_PREFIX)}
        return averaged_state_dict(state, self.content) if ema else state

    @property
    def averaged(self) -> bool:
        return AVERAGE_KEY in self.content


def read_run_checkpoint(path: str | Path, map_location: str = "cpu") -> RunCheckpoint:
    """The checkpoint ``path`` names (a file, or a run directory's best), checked as xdllm's."""
    checkpoint_path = resolve_checkpoint(path)
    try:
        content = read_checkpoint_file(checkpoint_path, map_location)
    except CheckpointError as error:
        others = sorted(other.name for other in checkpoint_path.parent.glob("*.ckpt") if other != checkpoint_path)
        if checkpoint_path == Path(path).expanduser() or not others:
            raise
        raise CheckpointError(f"{error}; {checkpoint_path.parent} also holds {', '.join(others)}: give one of "
                              "them by its path") from error
    if CONFIG_KEY not in content or "state_dict" not in content:
        raise XdllmError(f"{checkpoint_path} is not an xdllm checkpoint (no {CONFIG_KEY} or state_dict)")
    config = OmegaConf.create(content[CONFIG_KEY])
    recorded = list(config.get("model_search_path") or [])
    discover_families([folder for folder in recorded if Path(folder).is_dir()])  # an uninstalled family's modules
    return RunCheckpoint(checkpoint_path, content, config)
