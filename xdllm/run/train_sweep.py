"""``xdllm train -m KEY=A,B ...``: one training run per combination of the swept values, one after
another in this process, each a whole run directory named by its settings under one sweep folder::

    <sweep>/optim.lr=0.001,seed=0/   config.yaml, checkpoints/, tensorboard/, generate/, ...
    <sweep>/optim.lr=0.0003,seed=0/
    <sweep>/sweep.jsonl              one line per finished run: settings, run directory, the step it
                                     ended at (and why, where early_stopping ended it), results
    <sweep>/sweep.yaml               each run's folder, settings and overrides (paths absolute)
    <sweep>/sweep.log                the sweep's commands and lines: each run started and finished,
                                     the ranking, how it ended (each run's own lines: its train.log)

``<sweep>`` is ``run_dir`` when given, else ``runs/<name>/sweep-<time>``; ``tensorboard --logdir
<sweep>`` overlays the runs' curves. Values are swept with Hydra's override grammar, several
swept keys give their Cartesian product. Every combination is composed and its components built
before the first run trains, so a value one of them refuses costs no training. A sweep stopped
part-way (Ctrl-C, SIGTERM, an error) is continued with ``xdllm train resume=<sweep>``: the
finished runs are kept, the stopped one continues from its newest checkpoint, the rest train.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig

from xdllm.config.compose import compose_config
from xdllm.config.override_text import command, override
from xdllm.config.run_paths import record_absolute_paths
from xdllm.errors import XdllmError
from xdllm.folder_names import SWEEP_PLAN
from xdllm.run.after_training import finish_logged
from xdllm.run.build import build_components
from xdllm.run.generation_record import settings_name
from xdllm.run.new_folder import new_folder, time_stamp
from xdllm.run.run_checkpoint import CHECKPOINT_DIR
from xdllm.run.run_log import RunLog, keeping_run_log
from xdllm.run.sweep import (
    GENERATION_SPEED,
    SWEEP_SUMMARY,
    result_figures,
    sweep_combinations,
    sweep_summary_lines,
    swept_settings,
)
from xdllm.run.sweep_repeats import refuse_repeats
from xdllm.run.train import TrainResult, check_run_options, train
from xdllm.temporary_files import write_jsonl_atomically, write_text_atomically

SWEEP_LOG = "sweep.log"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its folder's name, its swept values and the overrides it is composed
    from (``run_dir`` included, paths absolute)."""

    folder: str
    settings: dict[str, str]
    overrides: list[str]


@dataclass
class SweepResult:
    """What a sweep did: its folder, each finished run's line of ``sweep.jsonl``, and the run a
    Ctrl-C or SIGTERM stopped (None: it ran to the end)."""

    sweep_dir: Path
    runs: list[dict[str, Any]]
    stopped: TrainResult | None = None

    def printed(self) -> dict[str, Any]:
        return {"sweep": str(self.sweep_dir), "summary": str(self.sweep_dir / SWEEP_SUMMARY), "runs": self.runs}

    @property
    def resume_command(self) -> str:
        return train_resume_command(self.sweep_dir)


def train_resume_command(sweep_dir: Path) -> str:
    """``xdllm train resume=<sweep>``: what continues a stopped training sweep."""
    return command("xdllm", "train", override("resume", sweep_dir))


def _refuse_unsweepable(combinations: Sequence[dict[str, str]]) -> None:
    for key in combinations[0]:
        if key in ("run_dir", "existing_run_dir"):
            raise XdllmError(f"{key} cannot be swept: a sweep's runs go into folders named by their settings under "
                             "one run_dir")


def _refuse_several_processes(config: DictConfig) -> None:
    devices = config.trainer.devices
    strategy = str(config.trainer.get("strategy", "auto"))
    if strategy.startswith(("ddp", "fsdp")) or (isinstance(devices, int) and devices > 1) or isinstance(devices, list):
        raise XdllmError(f"-m trains the sweep's runs one after another in this process, but trainer.strategy="
                         f"{strategy} with trainer.devices={devices} trains in several: run one xdllm train per "
                         "value for those")


def plan_sweep(overrides: Sequence[str]) -> tuple[Path, list[PlannedRun], list[DictConfig]]:
    """The sweep's folder, its runs and their composed configs, every one checked (its options,
    and its components built) before anything is written. Without ``run_dir`` the folder is a new
    ``runs/<name>/sweep-<time>`` (numbered when another sweep started in the same second), removed
    again when a check fails."""
    fixed, combinations = sweep_combinations(overrides, "train")
    _refuse_unsweepable(combinations)
    refuse_repeats([settings_name(combination) for combination in combinations], "run")
    first = compose_config("train", [*fixed, *(f"{k}={v}" for k, v in combinations[0].items())])
    if first.run_dir is not None:
        return _planned(Path(first.run_dir).expanduser().resolve(), fixed, combinations)
    with new_folder(Path("runs", first.name).resolve(), f"sweep-{time_stamp()}") as made:
        return _planned(made, fixed, combinations)


def _planned(sweep_dir: Path, fixed: Sequence[str], combinations: Sequence[dict[str, str]]
             ) -> tuple[Path, list[PlannedRun], list[DictConfig]]:
    plan, configs = [], []
    for combination in combinations:
        folder = settings_name(combination)
        given = [*(o for o in fixed if not o.startswith("run_dir=")), *(f"{k}={v}" for k, v in combination.items()),
                 override("run_dir", sweep_dir / folder)]
        config = compose_config("train", given)
        _refuse_several_processes(config)
        try:
            check_run_options(config)
            build_components(copy.deepcopy(config))  # a value a component refuses, before any run trains
        except XdllmError as error:
            raise XdllmError(f"{folder}: {error}") from error
        plan.append(PlannedRun(folder, dict(combination), record_absolute_paths(config, given)))
        configs.append(config)
    return sweep_dir, plan, configs


def run_train_sweep(overrides: Sequence[str], sweep_log: RunLog) -> SweepResult:
    """Train once per combination of the swept values, each into its folder of the sweep;
    ``sweep_log`` writes to the sweep's ``sweep.log`` once its folder is made
    (:func:`keeping_sweep_log`)."""
    sweep_dir, plan, configs = plan_sweep(overrides)
    if (sweep_dir / SWEEP_PLAN).exists():
        raise XdllmError(f"{sweep_dir} holds a sweep already ({SWEEP_PLAN}); continue it with: "
                         f"{train_resume_command(sweep_dir)}, or choose another run_dir")
    held = [run.folder for run in plan if (sweep_dir / run.folder).exists()]
    if held:
        raise XdllmError(f"{sweep_dir / held[0]} exists already: choose another run_dir for the sweep")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomically(sweep_dir / SWEEP_PLAN, yaml.safe_dump(
        {"runs": [{"folder": run.folder, "settings": run.settings, "overrides": run.overrides} for run in plan]},
        sort_keys=False))
    sweep_log.start(sweep_dir)
    log.info("a sweep of %d runs in %s", len(plan), sweep_dir)
    return _train_planned(sweep_dir, list(zip(plan, configs)), [], resumed=set(), sweep_log=sweep_log)


def continue_train_sweep(sweep_dir: Path, sweep_log: RunLog) -> SweepResult:
    """``xdllm train resume=<sweep>``: keep the finished runs, continue a stopped one from its
    newest checkpoint, train the rest, as the sweep's ``sweep.yaml`` composed them."""
    plan = _read_plan(sweep_dir / SWEEP_PLAN)
    finished = {line["folder"]: line for line in sweep_summary_lines(sweep_dir / SWEEP_SUMMARY)}
    results = [finished[run.folder] for run in plan if run.folder in finished]
    todo = [(run, compose_config("train", run.overrides)) for run in plan if run.folder not in finished]
    if not todo:
        raise XdllmError(f"the sweep in {sweep_dir} has finished all {len(plan)} runs: there is nothing to continue")
    resumed = {run.folder for run, _ in todo if any((sweep_dir / run.folder / CHECKPOINT_DIR).glob("*.ckpt"))}
    for run, config in todo:  # stopped before its first checkpoint: what it wrote is moved aside
        if run.folder not in resumed and (sweep_dir / run.folder).exists():
            config.existing_run_dir = "move_aside"
    sweep_log.start(sweep_dir)
    log.info("continuing the sweep in %s: %d of %d runs finished", sweep_dir, len(results), len(plan))
    return _train_planned(sweep_dir, todo, results, resumed, sweep_log)


def keeping_sweep_log(command: Sequence[str]) -> AbstractContextManager[RunLog]:
    """The sweep's ``sweep.log`` while the block runs: the lines of this module (the sweep's own),
    from the command on, and how the block ended."""
    return keeping_run_log(command, SWEEP_LOG, logger_names=(__name__,))


def _train_planned(sweep_dir: Path, todo: Sequence[tuple[PlannedRun, DictConfig]], results: list[dict[str, Any]],
                   resumed: set[str], sweep_log: RunLog) -> SweepResult:
    """Train (or continue) each planned run, rewriting ``sweep.jsonl`` after each."""
    total = len(results) + len(todo)
    outcome = SweepResult(sweep_dir, results)
    try:
        for run, config in todo:
            with keeping_run_log(("xdllm", "train", *run.overrides)) as run_log:
                log.info("sweep run %d of %d: %s", len(results) + 1, total, run.folder)
                result = train(config, resume=str(sweep_dir / run.folder) if run.folder in resumed else None,
                               overrides=run.overrides, run_log=run_log)
                summary = finish_logged(result, config, run_log)
            if result.stopped_at_step is not None:
                outcome.stopped = result
                break
            summary = summary or {"checkpoint": str(result.best_checkpoint)}
            results.append({"settings": swept_settings(run.settings, config), "folder": run.folder,
                            "run_dir": str(result.run_dir), "monitor": result.monitor, "mode": result.mode,
                            "best_score": result.best_score, "step": result.global_step,
                            "early_stop": result.early_stop, **summary})
            write_jsonl_atomically(sweep_dir / SWEEP_SUMMARY, results)  # after each: a stop keeps what finished
            log.info("sweep run %d of %d finished%s: %s: best %s=%s", len(results), total,
                     f" early, at step {result.global_step}" if result.early_stop else "", run.folder, result.monitor,
                     "none" if result.best_score is None else f"{result.best_score:.4g}")
    except BaseException:
        log.warning("the sweep stopped with %d of %d runs finished; continue it with: %s", len(results), total,
                    outcome.resume_command)
        raise
    if outcome.stopped is None:  # a stopped one: the caller says where it stopped and how to continue
        log.info(ranking(results))
        sweep_log.note("finished")
    else:
        sweep_log.note(f"{outcome.stopped.stop_line} of {outcome.stopped.run_dir}, with {len(results)} of {total} "
                       f"runs finished; continue the sweep with: {outcome.resume_command}")
    return outcome


def ranking(results: Sequence[dict[str, Any]]) -> str:
    """The finished runs, best validation score first, a line each (runs without one last); runs
    that monitor different metrics (``-m model=mlm,dflash``) are ranked apart, a block per metric."""
    by_metric: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for line in results:
        if line.get("best_score") is not None:
            by_metric.setdefault((line.get("monitor", "score"), line.get("mode")), []).append(line)
    lines = []
    for (monitor, mode), scored in by_metric.items():
        order = sorted(scored, key=lambda line: line["best_score"], reverse=mode != "min")
        lines += [f"the sweep's runs, best {monitor} first:",
                  *(f"  {line['best_score']:.4g}  {line['folder']}{_generation_scores(line)}" for line in order)]
    lines = lines or ["the sweep's runs, best score first:"]
    lines += [f"  none  {line['folder']}{_generation_scores(line)}"
              for line in results if line.get("best_score") is None]
    return "\n".join(lines)


def _generation_scores(line: dict[str, Any]) -> str:
    """``  (after training: exact_match=0.998, token_accuracy=0.9998)``: the scores of the run's
    generation after training, where it made one (the figures of its speed are left out)."""
    shown = result_figures(line, leave_out=("best_score", *GENERATION_SPEED))
    return f"  (after training: {shown})" if shown else ""


def _read_plan(path: Path) -> list[PlannedRun]:
    try:
        record = yaml.safe_load(path.read_text())
        return [PlannedRun(run["folder"], dict(run["settings"]), list(run["overrides"])) for run in record["runs"]]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as error:
        raise XdllmError(f"{path} is not a sweep's plan xdllm wrote ({' '.join(str(error).split())}): it was "
                         "edited or damaged") from error


def is_train_sweep(path: str | Path) -> bool:
    """Whether ``path`` is a training sweep's folder (it holds ``sweep.yaml``)."""
    return (Path(path).expanduser() / SWEEP_PLAN).is_file()


def sweep_run_configs(overrides: Sequence[str]) -> list[DictConfig]:
    """The composed config of every run of a sweep, for ``--cfg`` (nothing is checked or written)."""
    fixed, combinations = sweep_combinations(overrides, "train")
    return [compose_config("train", [*fixed, *(f"{k}={v}" for k, v in combination.items())])
            for combination in combinations]

