"""``xdllm train`` from Python (a notebook, a script):
``xdllm.train_run("experiment=sort_mlm", "trainer.max_steps=300")`` trains one run as the command
does, from the same overrides, in the same folders, with the same ``train.log``; it says the same
lines on stderr and returns what the command prints (:class:`TrainingResult`). Both train through
:func:`train_and_finish`.

Ctrl-C (a notebook's "interrupt the kernel") or SIGTERM stops training as it stops the command:
after the step under way, saved; the call then raises :class:`TrainingStopped` (a
``KeyboardInterrupt``, so that a notebook's "run all" stops there too), which names the saved state
and the call that continues it (``xdllm.train_run(resume=run_dir)``). A second Ctrl-C stops at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from xdllm.errors import XdllmError
from xdllm.folder_names import refuse_other_kind
from xdllm.run.checkpoint import TrainedRun, load_trained

SIGNALS = ("Ctrl-C", "SIGTERM")


@dataclass(frozen=True)
class TrainingResult:
    """A training run ``xdllm.train_run`` finished (or ``trainer.max_time`` stopped: ``stopped_by``)."""

    run_dir: Path
    step: int
    """The optimizer step training ended at."""
    best_checkpoint: Path | None
    last_checkpoint: Path | None
    monitor: str | None
    """``checkpoint.monitor``, the metric ``best_checkpoint`` is best by."""
    best_score: float | None
    summary: dict[str, Any] | None
    """The figures ``xdllm train`` prints at its end: those of the generation after training (None
    where the run asks for none, ``generate_after_train=false``, or was stopped before its end)."""
    stopped_by: str = ""
    """``trainer.max_time=...`` where that time limit ended training before ``trainer.max_steps``."""
    early_stop: str = ""
    """Why ``early_stopping`` ended training before ``trainer.max_steps`` (empty: it did not)."""

    def __repr__(self) -> str:
        """One line for a notebook: the folder, the best value, how it ended and the figures
        printed at the end (its paths left out: ``result.summary`` has them)."""
        best = "" if self.best_score is None else f", best {self.monitor}={self.best_score:.4g}"
        stopped = f", stopped by {self.stopped_by}" if self.stopped_by else ", stopped early" if self.early_stop else ""
        figures = {key: value for key, value in (self.summary or {}).items() if isinstance(value, (int, float))}
        said = ", ".join(f"{key}={value:.4g}" for key, value in figures.items())
        return f"TrainingResult(run_dir='{self.run_dir}', step={self.step}{best}{stopped}{f', {said}' if said else ''})"

    def load(self) -> TrainedRun:
        """The run loaded for inference, as ``xdllm.load_trained(run_dir)`` loads it (its best
        checkpoint)."""
        return load_trained(self.run_dir)


class TrainingStopped(KeyboardInterrupt):
    """Ctrl-C or SIGTERM (``cause``) stopped ``xdllm.train_run`` after ``step``, saved in
    ``last_checkpoint``; ``xdllm.train_run(resume=run_dir)`` continues the run."""

    def __init__(self, run_dir: Path, step: int, cause: str, last_checkpoint: Path | None) -> None:
        super().__init__(f"training stopped by {cause} after step {step}, saved in {last_checkpoint}; continue "
                         f"with: xdllm.train_run(resume={str(run_dir)!r})")
        self.run_dir, self.step, self.cause, self.last_checkpoint = run_dir, step, cause, last_checkpoint


def train_and_finish(config: DictConfig, overrides: Sequence[str], resume: str | None,
                     command: Sequence[str]) -> tuple[Any, dict[str, Any] | None]:
    """Train as ``config`` (composed from ``overrides``) says, continuing ``resume`` where given,
    then generate as it asks (:func:`~xdllm.run.after_training.finish_logged`), the run's log
    naming ``command``; the training's :class:`~xdllm.run.train.TrainResult` and the printed
    figures (None: none, or a process of DDP other than the first, which finishes nothing)."""
    from xdllm.run.after_training import finish_logged
    from xdllm.run.run_log import keeping_run_log
    from xdllm.run.train import train

    with keeping_run_log(command) as run_log:
        result = train(config, resume=resume, overrides=overrides, run_log=run_log)
        if not result.is_global_zero:
            return result, None
        print(f"run directory: {result.run_dir}")
        return result, finish_logged(result, config, run_log)


def train_run(*overrides: str, resume: str | Path | None = None) -> TrainingResult:
    """Train one run, as ``xdllm train OVERRIDE... [resume=PATH]`` does: ``overrides`` as the
    command takes them (``"experiment=sort_mlm"``, ``"trainer.max_steps=300"``); ``resume``, a run
    folder or checkpoint to continue (alone: with the overrides the run was started with). The run's
    lines go to stderr while it trains (through a handler of xdllm's loggers that have none of their
    own). Raises :class:`TrainingStopped` when Ctrl-C or SIGTERM stops it, and
    :class:`~xdllm.errors.XdllmError` for a wrong override, as the command says it."""
    from xdllm.cli.stderr_handler import xdllm_lines_on_stderr
    from xdllm.config.compose import compose_config
    from xdllm.config.override_text import override
    from xdllm.config.run_paths import quoted_paths
    from xdllm.run.run_overrides import with_stored_overrides

    words = quoted_paths(override_words(overrides))
    resume_text = None if resume is None else str(resume)
    if resume_text is not None:
        refuse_other_kind(resume_text, ("training run",), "xdllm.train_run(resume=) takes one training run's folder "
                          f"or checkpoint (a sweep's run: {Path(resume_text) / '<its settings>'})")
    with xdllm_lines_on_stderr():
        words = with_stored_overrides(resume_text, words)
        config = compose_config("train", words)
        command = ("xdllm", "train", *words, *([override("resume", resume_text)] if resume_text else []))
        result, summary = train_and_finish(config, words, resume_text, command)
    if result.stopped_by in SIGNALS:
        raise TrainingStopped(result.run_dir, result.stopped_at_step, result.stopped_by, result.last_checkpoint)
    return TrainingResult(result.run_dir, result.global_step, result.best_checkpoint, result.last_checkpoint,
                          result.monitor, result.best_score, summary, result.stopped_by, result.early_stop)


def override_words(overrides: Sequence[Any]) -> list[str]:
    """``overrides`` checked as strings of single values; ``resume=`` among them is refused for the
    keyword."""
    from xdllm.config.compose import first_swept_override

    for given in overrides:
        if not isinstance(given, str):
            raise XdllmError(f"xdllm.train_run takes each override as a string ('trainer.max_steps=300'), got "
                             f"{type(given).__name__} {given!r}" + (": unpack a list with xdllm.train_run(*overrides)"
                                                                     if isinstance(given, (list, tuple)) else ""))
        if given.startswith("resume="):
            raise XdllmError(f"{given!r}: give the run to continue as xdllm.train_run(resume={given[7:]!r})")
    swept = first_swept_override(list(overrides))
    if swept is not None:
        values, key = ", ".join(repr(value) for value in swept.sweep_string_iterator()), swept.get_key_element()
        raise XdllmError(f"{swept.input_line!r} gives several values, but xdllm.train_run trains one run: call it "
                         f"once per value (for value in [{values}]: xdllm.train_run(..., f'{key}={{value}}')), or "
                         "sweep with xdllm train -m (quote a single value that contains a comma)")
    return list(overrides)
