"""Find and load trained runs for inference."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from xdllm.config.run_paths import frozen_checkpoint_keys
from xdllm.config.schema import check_component
from xdllm.data import DiffusionDataModule
from xdllm.errors import XdllmError
from xdllm.evaluate.evaluation_loss import EvaluationLoss
from xdllm.interfaces import Tokenizer
from xdllm.registry import SEARCH_PATH_ENV, discover_families
from xdllm.run.build import RunComponents, build_components, build_datamodule, instantiate_component
from xdllm.run.stored_tokenizer import TOKENIZER_KEY, stored_tokenizer
from xdllm.train.checkpoint_io import CheckpointError, read_checkpoint_file
from xdllm.train.latest_checkpoint import LAST_NAME
from xdllm.train.module import FROZEN_SOURCES_KEY
from xdllm.train.weight_average import CHECKPOINT_KEY as AVERAGE_KEY
from xdllm.train.weight_average import averaged_state_dict

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
RUN_CONFIG = "config.yaml"
"""The resolved config a run writes in its directory (the checkpoints carry it too)."""
CONFIG_KEY = "xdllm_config"


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint to generate or evaluate from: a file as given, or a run directory's
    ``best.ckpt`` (else its ``last.ckpt``)."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        for candidate in (path / CHECKPOINT_DIR / name for name in ("best.ckpt", LAST_NAME)):
            if candidate.is_file():
                return candidate
        raise XdllmError(f"no checkpoint in run directory {path} (looked for "
                         f"{CHECKPOINT_DIR}/best.ckpt and {CHECKPOINT_DIR}/{LAST_NAME})")
    raise XdllmError(f"checkpoint not found: {path}")


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a run resumes from, its step, and why it was chosen."""

    checkpoint: Path
    global_step: int
    reason: str
    tokenizer_json: str | None = None
    """The tokenizer file the run trained with, as the checkpoint stores it (None: built-in, or
    a checkpoint from before checkpoints stored tokenizers)."""


def _global_step(path: Path) -> int:
    """A checkpoint's step, read without loading its tensors (memory-mapped)."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    return int(checkpoint["global_step"])


def resume_point(path: str | Path) -> ResumePoint:
    """What ``resume=<path>`` continues from: a checkpoint file as given, or the newest checkpoint
    of a run directory (by optimizer step, over ``last.ckpt``, ``best.ckpt`` and every
    ``step<N>.ckpt``) whose content digest checks out. Corrupt or unreadable newer ones are
    skipped and named in the reason; none valid is an error naming each."""
    path = Path(path).expanduser()
    if path.is_file():
        checkpoint = read_checkpoint_file(path)
        return ResumePoint(path, int(checkpoint["global_step"]), "the checkpoint given", checkpoint.get(TOKENIZER_KEY))
    if not path.is_dir():
        raise XdllmError(f"resume: no checkpoint file or run directory at {path}")
    candidates, problems = [], []
    for file in sorted((path / CHECKPOINT_DIR).glob("*.ckpt")):
        try:
            candidates.append((_global_step(file), file.name == LAST_NAME, file))
        except Exception as error:
            problems.append(f"{file.name} (unreadable: {' '.join(str(error).split())[:120]})")
    if not candidates and not problems:
        raise XdllmError(f"resume: run directory {path} has no checkpoint in {CHECKPOINT_DIR}/ (its run never "
                         "saved one); start it over without resume=, with existing_run_dir=move_aside")
    for step, _, file in sorted(candidates, reverse=True):
        try:
            checkpoint = read_checkpoint_file(file)
        except CheckpointError:
            problems.append(f"{file.name} (step {step}: corrupt, digest mismatch)")
            continue
        skipped = f"; skipped {', '.join(problems)}" if problems else ""
        return ResumePoint(file, step, f"the newest valid checkpoint of {path}{skipped}", checkpoint.get(TOKENIZER_KEY))
    raise XdllmError(f"resume: no valid checkpoint in {path / CHECKPOINT_DIR}: {', '.join(problems)}")


def run_dir_of(checkpoint: Path) -> Path:
    """The run directory a checkpoint belongs to (``<run>/checkpoints/x.ckpt`` -> ``<run>``)."""
    parent = checkpoint.resolve().parent
    return parent.parent if parent.name == CHECKPOINT_DIR else parent


@dataclass
class TrainedRun:
    """A checkpoint loaded for inference: its config, built components (model weights loaded,
    eval mode) and the frozen models its config names. ``ema``: whether the weights are the
    checkpoint's moving average (None: it has none, the run trained without ``optim.ema_decay``)."""

    checkpoint: Path
    run_dir: Path
    config: DictConfig
    components: RunComponents
    global_step: int
    frozen: dict[str, torch.nn.Module]
    ema: bool | None = None

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

    def predictor(self, **overrides: Any) -> Any:
        """The run's predictor (``config.predictor``) with ``overrides`` merged over it, each key
        checked against the predictor's signature: ``run.predictor(threshold=0.9)``."""
        merged = OmegaConf.to_container(OmegaConf.merge(self.config.predictor, overrides), resolve=True)
        check_component(merged, "predictor")
        return instantiate_component(OmegaConf.create(merged), "predictor", tokenizer=self.tokenizer)

    def loss_function(self) -> EvaluationLoss:
        """The family loss as ``(model, batch) -> LossDict``, handed the frozen models (and no
        global counts: evaluation normalises locally) when it takes a context."""
        return EvaluationLoss(self.components.loss, self.frozen)


def load_trained(path: str | Path, map_location: str = "cpu", ema: bool = True,
                 data_path: str | Path | None = None, frozen: Mapping[str, str | Path] | None = None) -> TrainedRun:
    """Load a checkpoint (file or run directory): config, model weights (eval mode), components.
    ``ema``: the weights' moving average where the checkpoint has one, else the trained weights.
    Frozen models load their own averages. ``data_path``: where the run's data
    (``task.params.path``) is now, when it moved since training; ``frozen``: where its frozen
    models are now (name -> checkpoint file or run directory)."""
    checkpoint_path = resolve_checkpoint(path)
    checkpoint = read_checkpoint_file(checkpoint_path, map_location)
    if CONFIG_KEY not in checkpoint or "state_dict" not in checkpoint:
        raise XdllmError(f"{checkpoint_path} is not an xdllm checkpoint (no {CONFIG_KEY} or state_dict)")
    config = OmegaConf.create(checkpoint[CONFIG_KEY])
    if data_path is not None:
        relocate_data(config, data_path)
    for name, place in (frozen or {}).items():
        relocate_frozen(config, name, place)
    recorded = list(config.get("model_search_path") or [])
    discover_families([folder for folder in recorded if Path(folder).is_dir()])  # an uninstalled family's modules
    try:
        components = build_components(config, stored_tokenizer(checkpoint, config, checkpoint_path))
    except XdllmError as error:
        if data_path is None and data_missing(config):
            raise XdllmError(f"{error}; if the run's data moved since training, or the run was copied from another "
                             "machine, give its place now: data_path=<folder or file>") from error
        missing = [name for name in frozen_missing(config) if name not in (frozen or {})]  # not given now
        if missing:
            raise XdllmError(f"{error}; if the run's frozen models moved since training, or the runs were copied "
                             f"from another machine, give their place now: +frozen.{missing[0]}=<run directory or "
                             "checkpoint>") from error
        if not isinstance(error.__cause__, ImportError):
            raise
        raise XdllmError(f"{' '.join(str(error).split())} (the run's model family '{config.get('model_family')}' "
                         f"is not installed and not in a folder of the run's model_search_path {recorded}: give "
                         f"the folder holding its package with model_search_path=[<folder>] or "
                         f"{SEARCH_PATH_ENV}=<folder>)") from error
    prefix = "model."
    state = {k[len(prefix):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}
    averaged = AVERAGE_KEY in checkpoint
    components.model.load_state_dict(averaged_state_dict(state, checkpoint) if ema else state)
    components.model.eval()
    frozen_models, sources = load_frozen_models(config, map_location)
    _warn_of_other_steps(sources, checkpoint.get(FROZEN_SOURCES_KEY) or {}, checkpoint_path)
    return TrainedRun(checkpoint_path, run_dir_of(checkpoint_path), config, components,
                      int(checkpoint.get("global_step", 0)), frozen_models, ema if averaged else None)


def relocate_data(config: DictConfig, data_path: str | Path) -> None:
    """Point the run's ``task.params.path`` at ``data_path``; refused for a task that reads no file."""
    if not str(data_path).strip():
        raise XdllmError("data_path= is empty: give the folder or file the run's data is in now")
    params = config.task.get("params") or {}
    if "path" not in params:
        raise XdllmError(f"data_path={data_path}: the run's task {config.task.name} reads no data file or folder "
                         "(it has no task.params.path); data_path= is for runs trained on prepared data or a text file")
    config.task.params.path = str(Path(data_path).expanduser().resolve())


def relocate_frozen(config: DictConfig, name: str, place: str | Path) -> None:
    """Point the run's frozen model ``name`` at ``place``, and every component key that gave its
    old checkpoint straight (dflash's ``model.target``); refused for a name the run lacks."""
    named = dict(config.get("frozen") or {})
    if name not in named:
        raise XdllmError(f"frozen.{name}={place}: the run has no frozen model {name!r} (it has: "
                         f"{', '.join(named) or 'none'})")
    if not str(place).strip():
        raise XdllmError(f"frozen.{name}= is empty: give the run directory or checkpoint the frozen model is in now")
    new = str(Path(place).expanduser().resolve())
    for key in frozen_checkpoint_keys(config, name):
        if OmegaConf.select(config, key) == named[name]:
            OmegaConf.update(config, key, new)
    config.frozen[name] = new


def frozen_missing(config: DictConfig) -> list[str]:
    """The run's frozen models whose checkpoint file or run directory is not there."""
    return [name for name, place in (config.get("frozen") or {}).items()
            if isinstance(place, str) and not Path(place).exists()]


def _warn_of_other_steps(loaded: Mapping[str, Mapping[str, Any]], recorded: Mapping[str, Mapping[str, Any]],
                         checkpoint: Path) -> None:
    """A line for each frozen model whose training step is not the one the run trained with (a
    target trained on, or another run given in its place): the run still works with it, but was
    trained against other weights (a drafter's drafts are then accepted less often)."""
    for name, source in loaded.items():
        trained_with = recorded.get(name, {}).get("global_step")
        if trained_with is not None and trained_with != source["global_step"]:
            log.warning("frozen.%s: %s holds training step %s, but %s was trained with step %s of %s: it runs, "
                        "against other weights than it trained with", name, source["checkpoint"],
                        source["global_step"], checkpoint, trained_with, recorded[name].get("checkpoint"))


def data_missing(config: DictConfig) -> bool:
    """Whether the run's task reads a data file or folder that is not there."""
    path = (config.task.get("params") or {}).get("path")
    return isinstance(path, str) and not Path(path).exists()


def load_frozen_models(config: DictConfig, map_location: str = "cpu"
                       ) -> tuple[dict[str, torch.nn.Module], dict[str, dict[str, object]]]:
    """The models named in ``config.frozen`` (name -> checkpoint file or run directory), in
    eval mode without gradients, and where each came from (checkpoint path and step)."""
    models: dict[str, torch.nn.Module] = {}
    sources: dict[str, dict[str, object]] = {}
    for name, path in (config.get("frozen") or {}).items():
        if not path:
            raise XdllmError(f"frozen.{name} needs a checkpoint file or run directory")
        run = load_trained(path, map_location)
        models[name] = run.model.requires_grad_(False)
        sources[name] = {"checkpoint": str(run.checkpoint.resolve()), "global_step": run.global_step,
                         "model_family": run.config.get("model_family")}
    return models, sources
