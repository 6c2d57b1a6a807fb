"""`xdllm train`: compose -> build -> Lightning fit, with everything in one run directory.

Run directory layout::

    <run_dir>/config.yaml              resolved config
    <run_dir>/overrides.yaml           the overrides it was composed from (resume=<run_dir> reuses them)
    <run_dir>/checkpoints/best.ckpt    best by checkpoint.monitor / checkpoint.mode (atomic writes)
    <run_dir>/checkpoints/last.ckpt    the newest state: every checkpoint.last_every_n_steps
                                       steps, at the end and after Ctrl-C (resume from it)
    <run_dir>/tensorboard/             TensorBoard events (training curves, history views)
    <run_dir>/history/                 denoising history files
    <run_dir>/generate/...             predictions.jsonl of the final generation
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from xdllm.config.run_paths import record_absolute_paths
from xdllm.data.lightning_datamodule import DiffusionDataModule
from xdllm.data.prepared_task import PreparedTask
from xdllm.errors import CollateError, XdllmError, os_error_text
from xdllm.history.recorder import check_history_k
from xdllm.run.build import build_components, build_datamodule, check_positions
from xdllm.run.checkpoint import resume_point
from xdllm.run.choice_scores import ChoiceProbe
from xdllm.run.dead_worker import dead_worker_error
from xdllm.run.free_text import apply_task_defaults, is_free_text
from xdllm.run.frozen_models import load_frozen_models
from xdllm.run.held_out_check import the_trained_values, unkept_held_out
from xdllm.run.initial_weights import initial_weights, naming_the_tokenizer_taken
from xdllm.run.judge_model import validation_judging
from xdllm.run.new_run_dir import new_run_dir
from xdllm.run.preflight import check_loss_reads_collated_batches
from xdllm.run.resume_check import CHOICES_SHA256_KEY, TASK_DATA_SHA256_KEY, check_resume_matches
from xdllm.run.rewind import set_aside_later_steps
from xdllm.run.run_checkpoint import CHECKPOINT_DIR
from xdllm.run.run_directory import claim_run_dir, prepare_run_dir, resolve_run_dir
from xdllm.run.run_lock import RunDirLock, refuse_if_training
from xdllm.run.run_log import RunLog
from xdllm.run.run_overrides import continue_command
from xdllm.run.stored_tokenizer import resumed_tokenizer, tokenizer_record
from xdllm.run.validation_change import restart_best_if_measure_changed
from xdllm.train.atomic_checkpoint_io import AtomicCheckpointIO
from xdllm.train.best_checkpoint import NewestOnTieCheckpoint
from xdllm.train.checkpoint_layout import LAST_NAME
from xdllm.train.early_stopping import early_stopping
from xdllm.train.history_hook import ValidationHistory
from xdllm.train.latest_checkpoint import LatestCheckpoint
from xdllm.train.metric_lines import MetricLines
from xdllm.train.model_summary import ModelSizeLine
from xdllm.train.module import DiffusionLMModule
from xdllm.train.optim_config import OptimConfig, lr_multiplier
from xdllm.train.progress_bar import training_progress_bar
from xdllm.train.step_logger import OptimizerStepLogger
from xdllm.train.stop_on_interrupt import StopOnInterrupt, StoppedByInterrupt
from xdllm.train.wall_clock_limit import wall_clock_limit

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    run_dir: Path
    best_checkpoint: Path | None
    last_checkpoint: Path | None
    is_global_zero: bool
    free_text: bool
    stopped_at_step: int | None = None
    """The step training stopped after because of Ctrl-C or SIGTERM (None: it ran to the end)."""
    stopped_by: str = ""
    """What stopped it: ``Ctrl-C`` or ``SIGTERM``."""
    continue_command: str = ""
    """The command that continues this run (its overrides and ``resume=<run_dir>``)."""
    monitor: str | None = None
    best_score: float | None = None
    """The best value of ``monitor`` (``checkpoint.monitor``), that of ``best.ckpt``."""
    mode: str | None = None
    """Whether the best ``monitor`` is the ``max`` or the ``min``."""
    global_step: int = 0
    """The optimizer step training ended at."""
    early_stop: str = ""
    """Why ``early_stopping`` ended training before ``trainer.max_steps`` (empty: it did not)."""

    @property
    def stop_line(self) -> str:
        """What stopped training, and after which step (of a run stopped before its end)."""
        return f"stopped by {self.stopped_by} after step {self.stopped_at_step}"


class TrainingInterrupted(KeyboardInterrupt):
    """A second Ctrl-C stopped training at once; ``run_dir`` holds what was saved before."""

    def __init__(self, run_dir: Path, continue_command: str) -> None:
        super().__init__(f"a second Ctrl-C stopped training at once; what it saved before is in {run_dir}")
        self.run_dir = run_dir
        self.continue_command = continue_command


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


STEP_ITSELF = "xdllm runs the optimizer step itself"
NO_EPOCHS = "xdllm trains one endless epoch, where Lightning's minimum keeps any stop from happening"
MOVED_TRAINER_KEYS = {"gradient_clip_val": ("optim.gradient_clip_val", STEP_ITSELF),
                      "accumulate_grad_batches": ("optim.accumulate_grad_batches", STEP_ITSELF),
                      "min_steps": ("early_stopping.min_steps", NO_EPOCHS),
                      "min_epochs": ("early_stopping.min_steps", NO_EPOCHS)}
"""Lightning Trainer arguments the harness handles itself: the key to set instead, and why."""


def check_run_options(config: DictConfig) -> None:
    for key, (replacement, reason) in MOVED_TRAINER_KEYS.items():
        if key in config.trainer:
            raise XdllmError(f"trainer.{key} is not used: {reason}; set {replacement} instead")
    if config.checkpoint.mode not in ("max", "min", None):
        raise XdllmError(f"checkpoint.mode must be max, min or null, got {config.checkpoint.mode!r}")
    monitor = config.checkpoint.monitor
    if monitor is not None and not str(monitor).startswith("val/"):
        raise XdllmError(f"checkpoint.monitor={monitor!r} is not a validation metric: they are named val/<name> "
                         "(val/loss, val/exact_match, ...; see the family's docs)")
    if config.trainer.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise XdllmError(f"trainer.accelerator={config.trainer.accelerator} but this machine has no "
                         "CUDA device torch can use; use trainer.accelerator=cpu (or auto)")


def say_what_never_happens(config: DictConfig, optim: OptimConfig) -> None:
    """Warn of settings that ``trainer.max_steps`` cuts off: no validation, a warmup never done."""
    max_steps = config.trainer.max_steps
    if config.trainer.val_check_interval > max_steps:
        stopping = config.early_stopping.patience is not None or config.early_stopping.stop_at is not None
        log.warning("trainer.val_check_interval=%d is more than trainer.max_steps=%d: the run never validates "
                    "(no val/ metrics, no validation history, no best.ckpt%s; what follows training uses "
                    "last.ckpt)", config.trainer.val_check_interval, max_steps, ", no early_stopping" * stopping)
    if optim.warmup_steps >= max_steps:
        log.warning("optim.warmup_steps=%d is not less than trainer.max_steps=%d: the learning rate only warms up, "
                    "to %.3g at the last step (optim.lr=%g), and optim.schedule=%s never starts", optim.warmup_steps,
                    max_steps, optim.lr * lr_multiplier(max_steps - 1, optim, max_steps), optim.lr, optim.schedule)


def is_launching_process() -> bool:
    """True in the process the user started; False in the processes a DDP launcher spawned
    (they re-run the command with a rank in the environment)."""
    return all(os.environ.get(name, "0") == "0" for name in ("RANK", "LOCAL_RANK", "NODE_RANK"))


PROGRESS_CHOICES = ("auto", "bar", "lines")


def progress_as_lines(progress: str, bar_enabled: bool = True) -> bool:
    """``auto``: a progress bar when both stdout (where Lightning draws the bar) and stderr (where
    xdllm logs) are a terminal, plain metric lines otherwise (a log file keeps every carriage
    return of a bar) or when the bar is turned off (``trainer.enable_progress_bar=false``, so
    metrics are still shown); ``bar`` or ``lines`` force one."""
    if progress not in PROGRESS_CHOICES:
        raise XdllmError(f"progress must be one of {', '.join(PROGRESS_CHOICES)}, got {progress!r}")
    on_terminal = sys.stdout.isatty() and sys.stderr.isatty()
    return progress == "lines" or (progress == "auto" and not (on_terminal and bar_enabled))


def checkpoint_callbacks(config: DictConfig, run_dir: Path) -> tuple[ModelCheckpoint, LatestCheckpoint]:
    """``best.ckpt`` by the monitored metric (the newer on a tie); ``last.ckpt`` every ``checkpoint.last_every_n_steps``
    steps and at the end; ``step<N>.ckpt`` every ``checkpoint.save_every_n_steps`` when set."""
    every = config.checkpoint.last_every_n_steps
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise XdllmError(f"checkpoint.last_every_n_steps must be a whole number >= 1, got {every!r}")
    keep = config.checkpoint.save_every_n_steps
    if keep is not None and (not isinstance(keep, int) or keep < 1):
        raise XdllmError(f"checkpoint.save_every_n_steps must be null or a whole number >= 1, got {keep!r}")
    best = NewestOnTieCheckpoint(
        dirpath=run_dir / CHECKPOINT_DIR, filename="best", monitor=config.checkpoint.monitor,
        mode=config.checkpoint.mode, save_top_k=1, save_last=False, auto_insert_metric_name=False,
        enable_version_counter=False)
    return best, LatestCheckpoint(run_dir / CHECKPOINT_DIR, every, keep)


def _stopped_at(step: int, run_dir: Path, continuing: str) -> str:
    """`` (training stopped at step N; once fixed, continue with: <continuing>)``, the second part
    only where a checkpoint was saved to continue from."""
    saved = (run_dir / CHECKPOINT_DIR / LAST_NAME).exists()
    return f" (training stopped at step {step}{f'; once fixed, continue with: {continuing}' if saved else ''})"


def train(config: DictConfig, resume: str | None = None, overrides: Sequence[str] = (),
          run_log: RunLog | None = None) -> TrainResult:
    """Train as configured. ``resume`` is a checkpoint file or run directory to continue from
    (in that run's directory unless ``run_dir`` is set); ``overrides`` are those ``config`` was
    composed from, stored in the run (``overrides.yaml``) so that ``resume=`` alone continues it;
    ``run_log`` writes to the run's ``train.log`` once its folder is claimed.

    Relative paths in ``config`` (and ``overrides``) are made absolute first, so the run works from any
    directory. Everything is validated (config, components, the resume checkpoint's integrity, the run
    directory) before anything is written (a new run's folder, made first, is removed where a check fails).
    """
    with new_run_dir(config, resume):
        return _train(config, resume, overrides, run_log)


def _train(config: DictConfig, resume: str | None, overrides: Sequence[str], run_log: RunLog | None) -> TrainResult:
    overrides = record_absolute_paths(config, overrides)
    check_run_options(config)
    point = resume_point(resume) if resume else None
    run_dir = resolve_run_dir(config, point)
    launching = is_launching_process()
    if launching:
        refuse_if_training(run_dir)  # at once, before building anything
    continuing = continue_command(run_dir)
    set_torch_threads(config)
    L.seed_everything(config.seed, workers=True, verbose=False)
    tokenizer, tokenizer_note = resumed_tokenizer(config, point.tokenizer_json if point else None)
    if tokenizer_note and launching:
        log.warning(tokenizer_note)
    start = initial_weights(config) if point is None else None  # a resumed run has its own weights
    if start is not None:
        tokenizer = start.tokenizer
        overrides = [*overrides, *([start.tokenizer_override] if start.tokenizer_override else [])]
    with naming_the_tokenizer_taken(start, config):
        components = build_components(config, tokenizer)
    held_out_drawn = not isinstance(components.task, PreparedTask)  # prepared data: splits kept apart
    started_from: dict[str, Any] = {}  # the checkpoint entry saying so
    if start is not None:
        started = start.load_into(components.model, config)
        unkept = unkept_held_out(start.source.config, config) if held_out_drawn else []
        if unkept and launching:
            log.warning("init_from=%s trained on this task: %s; this run's validation and test figures may count "
                        "samples its weights trained on (with %s they would not)", start.source.path,
                        "; ".join(unkept), the_trained_values(start.source.config))
        started_from = start.record()
        start = None  # the source checkpoint's whole content (its optimizer state too) is not held while training
        if launching:
            log.info(started)
    # training rows and the validation / after-training generations, as the predictor places them
    # (a loaded checkpoint's generation is checked with its own predictor options: check_canvas_fits)
    check_positions(components.model, components.task, int(config.derived.max_new_tokens), components.predictor)
    if config.history.num_samples > 0:
        check_history_k(config.history.k, components.tokenizer, "history.k")
    OmegaConf.set_struct(config, False)
    apply_task_defaults(config, components.task)
    config.run_dir = str(run_dir)
    resolved = OmegaConf.to_container(config, resolve=True)
    datamodule = build_datamodule(components, DiffusionDataModule)
    try:
        datamodule.check_training_stream()
    except ValueError as error:
        raise XdllmError(str(error)) from error
    history = ValidationHistory(
        run_dir=run_dir, tokenizer=components.tokenizer,
        num_samples=config.history.num_samples, k=config.history.k,
        grid=getattr(components.task, "grid_shape", None))
    probe = (ChoiceProbe(config.validation_choices, components, config.data.eval_batch_size)
             if config.get("validation_choices") is not None else None)
    data_sha256 = getattr(components.task, "source_sha256", None)  # generated tasks: none
    measured_otherwise: list[str] = []  # what a resume validates differently
    if point is not None:
        choices_sha256 = probe.choices.sha256 if probe is not None else None
        measured_otherwise = check_resume_matches(point, components.model, config, resolved, choices_sha256,
                                                  data_sha256, held_out_drawn)
        if launching:
            log.info("resuming from %s (step %d): %s", point.checkpoint, point.global_step, point.reason)
            if point.global_step == config.trainer.max_steps:
                log.info("nothing is left to train: the checkpoint is at trainer.max_steps=%d (give trainer.max_steps "
                         "above it to train on)", point.global_step)
    frozen, frozen_sources = load_frozen_models(config)
    judge, validation_predictor = validation_judging(config, components)
    optim = OptimConfig(**config.optim)
    module = DiffusionLMModule(
        model=components.model,
        loss_fn=components.loss,
        predictor=validation_predictor,
        evaluator=components.evaluator,
        optim=optim,
        total_steps=config.trainer.max_steps,
        history_factory=history.recorder_for_step if config.history.num_samples > 0 else None,
        config=resolved,
        frozen=frozen,
        frozen_sources=frozen_sources,
        checkpoint_extras={**tokenizer_record(components.tokenizer), **started_from,
                           **({CHOICES_SHA256_KEY: probe.choices.sha256} if probe is not None else {}),
                           **({TASK_DATA_SHA256_KEY: data_sha256} if data_sha256 is not None else {})},
        judge=judge,
        free_text=is_free_text(components.task),
        validation_probe=probe,
    )
    check_loss_reads_collated_batches(module, components.collators, datamodule.held_out_examples("validation")[:2],
                                      config.get("model_family", "<unknown>"),
                                      scores_losses="loss" in config.data.validation_roles)
    best, latest = checkpoint_callbacks(config, run_dir)
    stopper = StopOnInterrupt(save=latest.save)
    callbacks = [best, latest, LearningRateMonitor(logging_interval="step"), history, stopper]
    trainer_args = OmegaConf.to_container(config.trainer, resolve=True)
    time_limit = wall_clock_limit(trainer_args.pop("max_time", None))
    callbacks += [time_limit] if time_limit is not None else []
    early_stop = early_stopping(config.early_stopping, best.monitor, best.mode)
    if trainer_args.get("enable_model_summary", True):  # one line instead of Lightning's table
        callbacks.append(ModelSizeLine())
    trainer_args["enable_model_summary"] = False
    if progress_as_lines(config.get("progress", "auto"), trainer_args.get("enable_progress_bar", True)):
        trainer_args["enable_progress_bar"] = False
        callbacks.append(MetricLines(config.progress_every_n_steps))
    elif trainer_args.get("enable_progress_bar", True):  # the bar on the terminal, the lines in the run's log
        callbacks += [training_progress_bar(config.progress_every_n_steps),
                      MetricLines(config.progress_every_n_steps, file_only=True)]
    callbacks += [early_stop] if early_stop is not None else []  # after the validation's metric line
    try:
        trainer = L.Trainer(
            **trainer_args,
            default_root_dir=str(run_dir),
            logger=OptimizerStepLogger(save_dir=str(run_dir), name="tensorboard", version="",  # a resume hides
                                       purge_step=point.global_step + 1 if point else None),  # what it redoes
            callbacks=callbacks,
            plugins=[AtomicCheckpointIO()],
            use_distributed_sampler=False,
            num_sanity_val_steps=0,
            max_epochs=-1,
        )
    except (TypeError, ValueError, MisconfigurationException) as error:
        raise XdllmError(f"invalid trainer configuration: {error}") from error
    lock = None
    if launching:
        refuse_if_training(run_dir)  # again: one may have started since
        claim_run_dir(run_dir, point, config.get("existing_run_dir", "refuse"))
        lock = RunDirLock(run_dir)
        if point is None or point.global_step < config.trainer.max_steps:  # once sure to start; else nothing trains
            say_what_never_happens(config, optim)
    stopped_at_step, stopped_by = None, ""
    try:
        if launching:
            if point is not None:  # before trainer.fit starts the other processes
                set_aside_later_steps(run_dir, point)
                restart_best_if_measure_changed(run_dir, point, measured_otherwise)
            prepare_run_dir(run_dir, resolved, overrides)
            if run_log is not None:
                run_log.start(run_dir)
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(point.checkpoint) if point else None)
        if time_limit is not None and time_limit.stopped(trainer, config.trainer.max_steps):
            stopped_at_step, stopped_by = trainer.global_step, f"trainer.max_time={time_limit.max_time}"
    except StoppedByInterrupt as stop:
        stopped_at_step, stopped_by = stop.step, stop.cause
    except SystemExit:  # Lightning exits after a KeyboardInterrupt: the second Ctrl-C
        if stopper.requested:
            raise TrainingInterrupted(run_dir, continuing) from None
        raise
    except MisconfigurationException as error:
        if "could not find the monitored key" not in str(error):
            raise
        logged = ", ".join(sorted(key for key in trainer.callback_metrics if key.startswith("val/")))
        raise XdllmError(f"checkpoint.monitor={config.checkpoint.monitor} is not a metric this run logs at "
                         f"validation; it logs: {logged}. Continue from the newest checkpoint with: "
                         f"{continue_command(run_dir, ['checkpoint.monitor=<one of them>'])}") from error
    except CollateError as error:  # a sample the collator cannot lay out (a fill too short, a max_length)
        raise XdllmError(f"{error}{_stopped_at(trainer.global_step, run_dir, f'{continuing} KEY=VALUE')}") from error
    except Exception as error:
        death = dead_worker_error(error, config.data.num_workers)
        if death is None and isinstance(error, OSError):  # a write failed: a full disk, say
            stopped = _stopped_at(trainer.global_step, run_dir, continuing)
            raise XdllmError(f"{os_error_text(error)}{stopped}") from error
        if death is None:
            raise
        raise XdllmError(f"{' '.join(str(death).split()).rstrip('. ')}: a data-loading process died (the system "
                         f"kills one when memory runs out): try fewer data.num_workers (now "
                         f"{config.data.num_workers}); continue from the newest checkpoint with: "
                         f"{continuing}") from error
    finally:
        if lock is not None:
            lock.release()
    best_path = Path(best.best_model_path) if best.best_model_path else None
    last = run_dir / CHECKPOINT_DIR / LAST_NAME
    score = None if best.best_model_score is None else float(best.best_model_score)
    return TrainResult(run_dir, best_path, last if last.exists() else None, trainer.is_global_zero,
                       is_free_text(components.task), stopped_at_step, stopped_by, continue_command=continuing,
                       monitor=best.monitor, best_score=score, mode=best.mode, global_step=trainer.global_step,
                       early_stop=early_stop.reason if early_stop is not None else "")
