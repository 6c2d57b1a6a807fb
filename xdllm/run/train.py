"""`xdllm train`: compose -> build -> Lightning fit, with everything in one run directory.

Run directory layout::

    <run_dir>/config.yaml              resolved config
    <run_dir>/checkpoints/best.ckpt    best by checkpoint.monitor / checkpoint.mode (atomic writes)
    <run_dir>/checkpoints/last.ckpt    latest (resume from it)
    <run_dir>/tensorboard/             TensorBoard events (training curves, history views)
    <run_dir>/history/                 denoising history files
    <run_dir>/generate/...             predictions.jsonl of the final generation
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig, OmegaConf

from xdllm.errors import XdllmError
from xdllm.run.build import build_components, build_datamodule
from xdllm.run.checkpoint import CHECKPOINT_DIR, load_frozen_models, resolve_checkpoint
from xdllm.train.checkpoint_io import AtomicCheckpointIO
from xdllm.train.history_hook import ValidationHistory
from xdllm.train.module import DiffusionLMModule
from xdllm.train.optim import OptimConfig

RUN_DIR_ENV = "XDLLM_RUN_DIR"
log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    run_dir: Path
    best_checkpoint: Path | None
    last_checkpoint: Path | None
    is_global_zero: bool


def resolve_run_dir(config: DictConfig) -> Path:
    """``run_dir`` if set; else one shared by every DDP process (through the environment)."""
    if config.run_dir is not None:
        return Path(config.run_dir).expanduser().resolve()
    if RUN_DIR_ENV not in os.environ:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        os.environ[RUN_DIR_ENV] = str(Path("runs", config.name, stamp).resolve())
    return Path(os.environ[RUN_DIR_ENV])


def set_torch_threads(config: DictConfig) -> int:
    """Threads per process: ``torch_threads``, else the cores shared among CPU processes
    (oversubscribed OpenMP threads make small CPU kernels tens of times slower)."""
    threads = config.get("torch_threads")
    if threads is None:
        devices = config.trainer.devices if isinstance(config.trainer.devices, int) else 1
        processes = devices if config.trainer.accelerator == "cpu" else 1
        threads = max(1, (os.cpu_count() or 1) // max(1, processes))
    torch.set_num_threads(threads)
    return threads


def _save_config(config: DictConfig, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    temporary = run_dir / ".config.yaml.tmp"
    temporary.write_text(OmegaConf.to_yaml(config, resolve=True))
    os.replace(temporary, run_dir / "config.yaml")


MOVED_TRAINER_KEYS = {"gradient_clip_val": "optim.gradient_clip_val",
                      "accumulate_grad_batches": "optim.accumulate_grad_batches"}
"""Lightning Trainer arguments the harness handles itself (it runs the optimizer step)."""


def check_run_options(config: DictConfig) -> None:
    for key, replacement in MOVED_TRAINER_KEYS.items():
        if key in config.trainer:
            raise XdllmError(f"trainer.{key} is not used: xdllm runs the optimizer step itself; "
                             f"set {replacement} instead")
    if config.checkpoint.mode not in ("max", "min"):
        raise XdllmError(f"checkpoint.mode must be max or min, got {config.checkpoint.mode!r}")


def train(config: DictConfig, resume: str | None = None) -> TrainResult:
    """Train as configured. ``resume`` is a checkpoint file or run directory to continue from."""
    check_run_options(config)
    run_dir = resolve_run_dir(config)
    set_torch_threads(config)
    L.seed_everything(config.seed, workers=True, verbose=False)
    components = build_components(config)
    OmegaConf.set_struct(config, False)
    config.run_dir = str(run_dir)
    resolved = OmegaConf.to_container(config, resolve=True)
    datamodule = build_datamodule(components)
    history = ValidationHistory(
        run_dir=run_dir, tokenizer=components.tokenizer,
        num_samples=config.history.num_samples, k=config.history.k)
    frozen, frozen_sources = load_frozen_models(config)
    module = DiffusionLMModule(
        model=components.model,
        loss_fn=components.loss,
        predictor=components.predictor,
        evaluator=components.evaluator,
        optim=OptimConfig(**config.optim),
        total_steps=config.trainer.max_steps,
        history_factory=history.recorder_for_step if config.history.num_samples > 0 else None,
        config=resolved,
        frozen=frozen,
        frozen_sources=frozen_sources,
    )
    checkpoints = ModelCheckpoint(
        dirpath=run_dir / CHECKPOINT_DIR, filename="best", monitor=config.checkpoint.monitor,
        mode=config.checkpoint.mode, save_top_k=1, save_last=True, auto_insert_metric_name=False,
        enable_version_counter=False,
    )
    callbacks = [checkpoints, LearningRateMonitor(logging_interval="step"), history]
    if config.checkpoint.save_every_n_steps:
        callbacks.append(ModelCheckpoint(
            dirpath=run_dir / CHECKPOINT_DIR, filename="step{step:07d}", save_top_k=-1,
            every_n_train_steps=config.checkpoint.save_every_n_steps,
            auto_insert_metric_name=False, enable_version_counter=False))
    trainer_args = OmegaConf.to_container(config.trainer, resolve=True)
    try:
        trainer = L.Trainer(
            **trainer_args,
            default_root_dir=str(run_dir),
            logger=TensorBoardLogger(save_dir=str(run_dir), name="tensorboard", version=""),
            callbacks=callbacks,
            plugins=[AtomicCheckpointIO()],
            use_distributed_sampler=False,
            num_sanity_val_steps=0,
            max_epochs=-1,
        )
    except (TypeError, ValueError) as error:
        raise XdllmError(f"invalid trainer configuration: {error}") from error
    ckpt_path = str(resolve_checkpoint(resume, prefer="last")) if resume else None
    if trainer.is_global_zero:
        _save_config(OmegaConf.create(resolved), run_dir)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    best = Path(checkpoints.best_model_path) if checkpoints.best_model_path else None
    last = run_dir / CHECKPOINT_DIR / "last.ckpt"
    return TrainResult(run_dir, best, last if last.exists() else None, trainer.is_global_zero)
