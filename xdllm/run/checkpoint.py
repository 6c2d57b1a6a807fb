"""Find and load trained runs: the checkpoint a training resumes from, and a run loaded for
inference with its components and frozen models."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from xdllm.config.components import check_component
from xdllm.data.absent_data import AbsentDataTask, absent_data_task
from xdllm.data.datamodule import DiffusionData
from xdllm.errors import XdllmError
from xdllm.evaluate.evaluation_loss import EvaluationLoss
from xdllm.interfaces import Tokenizer
from xdllm.registry import SEARCH_PATH_ENV
from xdllm.run.build import RunComponents, build_components, build_datamodule, build_evaluator, instantiate_component
from xdllm.run.frozen_models import frozen_missing, load_frozen_models, relocate_frozen, warn_of_other_steps
from xdllm.run.generation_record import predictor_config
from xdllm.run.run_checkpoint import CHECKPOINT_DIR, read_run_checkpoint, run_dir_of
from xdllm.run.stored_tokenizer import TOKENIZER_KEY, stored_tokenizer
from xdllm.torch_files import why_unreadable
from xdllm.train.checkpoint_io import CheckpointError, read_checkpoint_file
from xdllm.train.checkpoint_layout import FROZEN_SOURCES_KEY, LAST_NAME


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a run resumes from, its step, and why it was chosen."""

    checkpoint: Path
    global_step: int
    reason: str
    tokenizer_json: str | None = None
    """The tokenizer file the run trained with, as the checkpoint stores it (None: built-in, or
    a checkpoint from before checkpoints stored tokenizers)."""


def checkpoint_step(path: Path) -> int:
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
            candidates.append((checkpoint_step(file), file.name == LAST_NAME, file))
        except Exception as error:
            problems.append(f"{file.name} (unreadable: {why_unreadable(file, error)})")
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

    def __repr__(self) -> str:
        """One line for a notebook or a log: what the run is and where it came from (the config and
        the model print on their own: ``run.config``, ``run.model``)."""
        parameters = sum(parameter.numel() for parameter in self.model.parameters())
        weights = "" if self.ema is None else f", ema={self.ema}"
        weights += f", frozen={sorted(self.frozen)}" if self.frozen else ""
        return (f"TrainedRun(family={self.config.get('model_family')!r}, task={self.config.task.get('name')!r}, "
                f"step={self.global_step}, parameters={parameters:,}{weights}, checkpoint='{self.checkpoint}')")

    @property
    def model(self) -> torch.nn.Module:
        return self.components.model

    @property
    def tokenizer(self) -> Tokenizer:
        return self.components.tokenizer

    @property
    def max_new_tokens(self) -> int:
        return int(self.config.derived.max_new_tokens)

    def datamodule(self) -> DiffusionData:
        """The run's data (refused, naming ``data_path=``, where its data file or folder is absent)."""
        if isinstance(self.components.task, AbsentDataTask):
            raise self.components.task.missing("the run's datamodule")
        return build_datamodule(self.components)

    def predictor(self, **overrides: Any) -> Any:
        """The run's predictor (``config.predictor``) with ``overrides`` merged over it, each key
        checked against the predictor's signature: ``run.predictor(threshold=0.9)``."""
        merged = predictor_config(self.config, overrides)
        check_component(merged, "predictor")
        return instantiate_component(OmegaConf.create(merged), "predictor", tokenizer=self.tokenizer)

    def evaluator(self, **overrides: Any) -> Any:
        """The run's evaluator (``config.evaluator``) with ``overrides`` merged over it, each key
        checked against the evaluator's signature: ``run.evaluator(num_levels=64)``."""
        if not overrides:
            return self.components.evaluator
        if self.config.get("evaluator") is None:
            raise XdllmError(f"evaluator.{next(iter(overrides))}: the {self.config.get('model_family')} family's "
                             "evaluator takes no options (it has no evaluator node in its config)")
        config = OmegaConf.merge(self.config, {"evaluator": overrides})
        check_component(OmegaConf.to_container(config.evaluator, resolve=True), "evaluator")
        return build_evaluator(config, self.tokenizer, self.components.task)

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
    checkpoint = read_run_checkpoint(path, map_location)
    config = checkpoint.config
    if data_path is not None:
        relocate_data(config, data_path)
    for name, place in (frozen or {}).items():
        relocate_frozen(config, name, place)
    missing = data_path is None and data_missing(config)
    absent = (absent_data_task(config.task.name, config.task.params.path, dict(config.get("derived") or {}))
              if missing else None)  # prompts given generate without it
    try:
        components = build_components(config, stored_tokenizer(checkpoint.content, config, checkpoint.path), absent)
    except XdllmError as error:
        if missing:
            raise XdllmError(f"{error}; if the run's data moved since training, or the run was copied from another "
                             "machine, give its place now: data_path=<folder or file>") from error
        missing = [name for name in frozen_missing(config) if name not in (frozen or {})]  # not given now
        if missing:
            raise XdllmError(f"{error}; if the run's frozen models moved since training, or the runs were copied "
                             f"from another machine, give their place now: +frozen.{missing[0]}=<run directory or "
                             "checkpoint>") from error
        if not isinstance(error.__cause__, ImportError):
            raise
        recorded = list(config.get("model_search_path") or [])
        raise XdllmError(f"{' '.join(str(error).split())} (the run's model family '{config.get('model_family')}' "
                         f"is not installed and not in a folder of the run's model_search_path {recorded}: give "
                         f"the folder holding its package with model_search_path=[<folder>] or "
                         f"{SEARCH_PATH_ENV}=<folder>)") from error
    components.model.load_state_dict(checkpoint.model_weights(ema))
    components.model.eval()
    frozen_models, sources = load_frozen_models(config, map_location)
    warn_of_other_steps(sources, checkpoint.content.get(FROZEN_SOURCES_KEY) or {}, checkpoint.path)
    return TrainedRun(checkpoint.path, run_dir_of(checkpoint.path), config, components, checkpoint.global_step,
                      frozen_models, ema if checkpoint.averaged else None)


def relocate_data(config: DictConfig, data_path: str | Path) -> None:
    """Point the run's ``task.params.path`` at ``data_path``; refused for a task that reads no file."""
    if not str(data_path).strip():
        raise XdllmError("data_path= is empty: give the folder or file the run's data is in now")
    params = config.task.get("params") or {}
    if "path" not in params:
        raise XdllmError(f"data_path={data_path}: the run's task {config.task.name} reads no data file or folder "
                         "(it has no task.params.path); data_path= is for runs trained on prepared data or a text file")
    config.task.params.path = str(Path(data_path).expanduser().resolve())


def data_missing(config: DictConfig) -> bool:
    """Whether the run's task reads a data file or folder that is not there."""
    path = (config.task.get("params") or {}).get("path")
    return isinstance(path, str) and not Path(path).exists()
