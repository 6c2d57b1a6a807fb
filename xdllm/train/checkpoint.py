"""Find and load trained runs for inference."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from xdllm.data import DiffusionDataModule
from xdllm.errors import XdllmError
from xdllm.interfaces import Tokenizer
from xdllm.registry import discover_families
from xdllm.train.build import RunComponents, build_components, build_datamodule

CHECKPOINT_DIR = "checkpoints"
CONFIG_KEY = "xdllm_config"


def resolve_checkpoint(path: str | Path, prefer: str = "best") -> Path:
    """A checkpoint file as given, or from a run directory: ``prefer="best"`` (generation) takes
    ``best.ckpt``, else ``last.ckpt``; ``prefer="last"`` (resuming) the other way round."""
    if prefer not in ("best", "last"):
        raise ValueError(f"prefer must be 'best' or 'last', got {prefer!r}")
    path = Path(path).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        order = ("best", "last") if prefer == "best" else ("last", "best")
        for candidate in (path / CHECKPOINT_DIR / f"{name}.ckpt" for name in order):
            if candidate.is_file():
                return candidate
        raise XdllmError(f"no checkpoint in run directory {path} (looked for "
                         f"{CHECKPOINT_DIR}/best.ckpt and {CHECKPOINT_DIR}/last.ckpt)")
    raise XdllmError(f"checkpoint not found: {path}")


def run_dir_of(checkpoint: Path) -> Path:
    """The run directory a checkpoint belongs to (``<run>/checkpoints/x.ckpt`` -> ``<run>``)."""
    parent = checkpoint.resolve().parent
    return parent.parent if parent.name == CHECKPOINT_DIR else parent


@dataclass
class TrainedRun:
    checkpoint: Path
    run_dir: Path
    config: DictConfig
    components: RunComponents

    @property
    def model(self) -> torch.nn.Module:
        return self.components.model

    @property
    def tokenizer(self) -> Tokenizer:
        return self.components.tokenizer

    @property
    def max_new_tokens(self) -> int:
        return int(self.config.derived.max_new_tokens)

    def datamodule(self) -> DiffusionDataModule:
        return build_datamodule(self.components)


def load_trained(path: str | Path, map_location: str = "cpu") -> TrainedRun:
    """Load a checkpoint (file or run directory): config, model weights (eval mode), components."""
    checkpoint_path = resolve_checkpoint(path)
    try:
        checkpoint = torch.load(checkpoint_path, map_location=map_location, weights_only=False)
    except Exception as error:
        raise XdllmError(f"could not read checkpoint {checkpoint_path}: {error}") from error
    if CONFIG_KEY not in checkpoint or "state_dict" not in checkpoint:
        raise XdllmError(f"{checkpoint_path} is not an xdllm checkpoint (no {CONFIG_KEY} or state_dict)")
    config = OmegaConf.create(checkpoint[CONFIG_KEY])
    discover_families(config.get("model_search_path") or [])  # an uninstalled family's modules
    components = build_components(config)
    prefix = "model."
    state = {k[len(prefix):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}
    components.model.load_state_dict(state)
    components.model.eval()
    return TrainedRun(checkpoint_path, run_dir_of(checkpoint_path), config, components)
