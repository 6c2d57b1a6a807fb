"""``xdllm runs [FOLDER ...]``: the training runs under some folders (default ``runs``), one line
each: its folder, family and task, the step it reached, how its last ``xdllm train`` ended
(finished, finished early by ``early_stopping``, stopped, failed, still training, or ended
without a word: killed), its best value of ``checkpoint.monitor``, and the overrides it was
given that not all the runs listed share (what tells them apart). Read from what a run keeps:
``config.yaml``, ``overrides.yaml``, the ``train.log`` its commands wrote
(:mod:`xdllm.run.run_log`; its metric lines, :mod:`xdllm.train.metric_lines`) and the lock a
training holds; no checkpoint is opened."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from xdllm.config.run_paths import is_path_key
from xdllm.config.schema import override_key
from xdllm.errors import XdllmError
from xdllm.folder_names import RUN_CONFIG
from xdllm.log_marks import EARLY_STOP_LINE
from xdllm.run.run_lock import refuse_if_training
from xdllm.run.run_log import RUN_LOG
from xdllm.run.run_overrides import OVERRIDES_FILE, stored_overrides

STAMP = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
COMMAND_LINE = re.compile(STAMP + r"xdllm train( |$)")
STEP_LINE = re.compile(STAMP + r"step (\d+)/\d+ ")
STOP_LINE = re.compile(STAMP + r"(stopped by .*? after step (\d+))$")
VALIDATION_LINE = re.compile(STAMP + r"validation at step (\d+) \([^)]*\): (.*)$")
ENDING_LINE = re.compile(STAMP + r"(result: |finished$|stopped by |error: )(.*)$")
EARLY_LINE = re.compile(STAMP + re.escape(EARLY_STOP_LINE.split("{step}")[0]) + r"(\d+): ")
REWIND_LINE = re.compile(STAMP + r"warning: resume: .* is at step (\d+), before the run's newest checkpoint")
STATE_SHOWN = 88
"""Characters of a state shown in the table (a failed run's error: its train.log and ``--json`` have
the whole line)."""


@dataclass(frozen=True)
class RunSummary:
    """What ``xdllm runs`` says of one run."""

    folder: Path
    family: str
    task: str
    step: int | None
    max_steps: int | None
    state: str
    monitor: str
    best: tuple[float, int] | None
    """The best value of ``monitor`` its validations logged, and the step of it."""
    given: tuple[str, ...] | None = None
    """The overrides it was given, the last of each key, ``run_dir`` left out (None: it kept none)."""
    mode: str = "max"
    """``checkpoint.mode``: whether a higher ``monitor`` is better (max) or a lower one (min)."""


def find_runs(folders: list[Path]) -> list[Path]:
    """The run folders (``config.yaml`` beside ``train.log``) in or under ``folders``, sorted; a
    run's own folders (its history, TensorBoard, generations) are not searched."""
    runs = []
    for folder in folders:
        if not folder.is_dir():
            raise XdllmError(f"{folder} is not a folder: give folders that hold runs (default: runs)")
        for parent, children, files in os.walk(folder):
            if RUN_CONFIG in files and RUN_LOG in files:
                runs.append(Path(parent))
                children.clear()  # no run inside a run: its history files are many
    return sorted(set(runs))


def _state(lines: list[str], training: bool) -> tuple[str, int | None]:
    """How the last command of the log ended, and the step it names when it stopped."""
    if training:
        return "training now", None
    starts = [index for index, line in enumerate(lines) if COMMAND_LINE.match(line)]
    last = lines[starts[-1]:] if starts else lines
    for line in reversed(last):
        stop = STOP_LINE.match(line)
        if stop:
            return stop[1], int(stop[2])
        ending = ENDING_LINE.match(line)
        if ending:
            kind, rest = ending[1], ending[2]
            if kind == "error: ":
                return f"failed: {rest}", None
            if kind == "stopped by ":
                return f"stopped by {rest}", None
            early = [int(found[1]) for line in last if (found := EARLY_LINE.match(line))]
            return ("finished early", early[-1]) if early else ("finished", None)
    return "ended without a word (killed?)", None


def _best(lines: list[str], monitor: str, mode: str) -> tuple[float, int] | None:
    """The best ``monitor`` of the validations logged, less those of a branch a rewind abandoned
    (``resume=`` an earlier checkpoint: the log keeps the validations after it, its files moved aside)."""
    found = []
    for line in lines:
        rewind = REWIND_LINE.match(line)
        if rewind:
            found = [pair for pair in found if pair[1] <= int(rewind[1])]
        validation = VALIDATION_LINE.match(line)
        if validation is None:
            continue
        for figure in validation[2].split():
            name, _, value = figure.partition("=")
            if name == monitor:
                found.append((float(value), int(validation[1])))
    sign = 1 if mode == "max" else -1  # the later of a tie, as best.ckpt keeps it
    return max(found, key=lambda pair: (sign * pair[0], pair[1]), default=None)


def summarize_run(folder: Path) -> RunSummary:
    """:class:`RunSummary` of the run in ``folder``; a run whose files cannot be read (a damaged
    ``config.yaml``, say) is a row that says which and why, and the others are listed still."""
    try:
        config = OmegaConf.load(folder / RUN_CONFIG)
        family, task = str(config.get("model_family", "?")), str(config.task.get("name", "?"))
        max_steps, monitor = int(config.trainer.max_steps), str(config.checkpoint.monitor)
        mode = str(config.checkpoint.mode)
    except (OSError, ValueError, AttributeError, yaml.YAMLError, OmegaConfBaseException) as error:
        return _unreadable(folder, RUN_CONFIG, error)  # AttributeError: a config without a task, say
    try:
        given = _given(folder)
    except XdllmError as error:
        return _unreadable(folder, OVERRIDES_FILE, error)
    try:
        lines = (folder / RUN_LOG).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as error:
        return _unreadable(folder, RUN_LOG, error)
    try:
        refuse_if_training(folder)
        training = False
    except XdllmError:
        training = True
    state, stopped_at = _state(lines, training)
    steps = [int(found[1]) for line in lines if (found := STEP_LINE.match(line))]
    step = stopped_at if stopped_at is not None else max_steps if state == "finished" else (
        steps[-1] if steps else None)
    return RunSummary(folder, family, task, step, max_steps, state, monitor, _best(lines, monitor, mode), given,
                      mode)


def _given(folder: Path) -> tuple[str, ...] | None:
    """The run's stored overrides, the last of each key, ``run_dir`` left out (None: it stored none)."""
    stored = stored_overrides(folder)
    if stored is None:
        return None
    last = {override_key(text): text for text in stored}
    last.pop("run_dir", None)
    return tuple(last.values())


def _unreadable(folder: Path, name: str, error: Exception) -> RunSummary:
    said = " ".join(str(error).split())
    what = said if isinstance(error, XdllmError) else f"{type(error).__name__}: {said}"  # an XdllmError says it all
    return RunSummary(folder, "?", "?", None, None, f"unreadable {name}: {what}", "", None)


def best_first(runs: list[RunSummary]) -> list[RunSummary]:
    """``runs`` by their best value of ``checkpoint.monitor``, best first (higher or lower by its
    ``checkpoint.mode``); runs that monitor different metrics in groups, by the metric's name; runs
    with no value yet last; a tie by folder."""
    def key(run: RunSummary) -> tuple:
        if run.best is None:
            return (True, "", 0.0, run.folder)
        return (False, run.monitor, -run.best[0] if run.mode == "max" else run.best[0], run.folder)

    return sorted(runs, key=key)


def run_record(run: RunSummary) -> dict[str, Any]:
    """``xdllm runs --json``'s object for ``run``: its summary's fields, the best value and its
    step apart, the folder absolute, ``given`` as a list (null: the run kept none)."""
    best, best_step = run.best if run.best is not None else (None, None)
    return {"folder": str(run.folder.resolve()), "family": run.family, "task": run.task, "step": run.step,
            "max_steps": run.max_steps, "state": run.state, "monitor": run.monitor, "mode": run.mode, "best": best,
            "best_step": best_step, "given": None if run.given is None else list(run.given)}


def setting_as_shown(override: str, relative_to: Path) -> str:
    """``override`` as the settings column shows it: the paths a run stored absolute
    (:mod:`xdllm.config.run_paths`) relative to ``relative_to`` where they are under it, as the
    run folders are (``init_from=runs/a``, ``model_search_path=[families]``)."""
    key, equals, _ = override.partition("=")
    path_key = is_path_key(key.lstrip("+")) or key.lstrip("+") == "model_search_path"
    if not equals or not path_key or relative_to == Path(relative_to.anchor):  # from /: absolute is as short
        return override
    folder, separator = re.escape(str(relative_to).rstrip(os.sep)), re.escape(os.sep)
    under = re.compile(rf"(?<=[=\[,'\"]){folder}({separator}[^\],'\"]*)?(?=[\],'\"]|$)")
    return under.sub(lambda match: match[1][1:] if match[1] else ".", override)


def run_table(runs: list[RunSummary], relative_to: Path) -> list[str]:
    """One aligned line per run: folder, family/task, step, best monitored value, state and, where
    some differ, the overrides that not all of the runs share."""
    kept = [set(run.given) for run in runs if run.given is not None]
    shared = set.intersection(*kept) if kept else set()
    settings = [" ".join(setting_as_shown(text, relative_to) for text in run.given or () if text not in shared)
                for run in runs]
    rows = [("run", "family/task", "step", "best", "state", *(("settings",) if any(settings) else ()))]
    for run, differing in zip(runs, settings):
        try:
            name = str(run.folder.relative_to(relative_to))
        except ValueError:
            name = str(run.folder)
        step = f"{'?' if run.step is None else run.step}/{'?' if run.max_steps is None else run.max_steps}"
        best = "-" if run.best is None else f"{run.monitor}={run.best[0]:.4g} (step {run.best[1]})"
        state = f"{run.state[:STATE_SHOWN]}..." if len(run.state) > STATE_SHOWN else run.state
        rows.append((name, f"{run.family}/{run.task}", step, best, state, *((differing,) if any(settings) else ())))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    return ["  ".join([*(cell.ljust(width) for cell, width in zip(row, widths)), row[-1]]).rstrip() for row in rows]
