"""A resume from a checkpoint older than its run's newest (a rewind: back to step 150 of a run
at step 200, to go on with a lower learning rate, say) trains the later steps again, as another
branch. What the earlier branch left after that step (its checkpoints, its validations' history
and their TensorBoard views) would mix with the new branch's: ``best.ckpt`` from the abandoned
step 200 would stay the run's best (and be what generation after training reads) unless the new
branch beat the score it had at step 150, and ``resume=<run>`` would pick the abandoned branch's
newest checkpoint. So those files are moved to ``<run>.abandoned-after-step<S>-<time>``, a run
folder of their own (with copies of the run's ``config.yaml`` and ``overrides.yaml``), and
``best.ckpt`` is chosen afresh from the new branch's validations when the abandoned branch had
replaced it (:class:`xdllm.train.best_checkpoint.NewestOnTieCheckpoint`)."""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from xdllm.folder_names import RUN_CONFIG
from xdllm.run.checkpoint import ResumePoint, checkpoint_step
from xdllm.run.new_folder import time_stamp
from xdllm.run.run_checkpoint import CHECKPOINT_DIR, run_dir_of
from xdllm.run.run_log import RUN_LOG
from xdllm.run.run_overrides import OVERRIDES_FILE

log = logging.getLogger(__name__)

_STEP_FOLDERS = {"history": re.compile(r"val-step(\d+)$"), "tensorboard": re.compile(r"history-step(\d+)$")}
"""Folders of a run holding one validation's files each, by the step it ran at."""


def later_files(run_dir: Path, point: ResumePoint) -> dict[Path, int]:
    """The checkpoints of ``run_dir`` past the resume point's step and, when there are any, the
    validation history folders past it, each with its step (paths relative to ``run_dir``). Empty
    when the point is the run's newest state (a resume after a crash redoes the steps past it, as
    the same branch)."""
    if run_dir_of(point.checkpoint) != run_dir:
        return {}
    later: dict[Path, int] = {}
    for file in sorted((run_dir / CHECKPOINT_DIR).glob("*.ckpt")):
        if file.resolve() == point.checkpoint.resolve():
            continue
        try:
            step = checkpoint_step(file)
        except Exception:  # unreadable: it is not a state to go back to, and last.ckpt gets rewritten
            continue
        if step > point.global_step:
            later[file.relative_to(run_dir)] = step
    if not later:
        return {}
    for folder, pattern in _STEP_FOLDERS.items():
        for child in sorted((run_dir / folder).glob("*")) if (run_dir / folder).is_dir() else []:
            if (match := pattern.match(child.name)) and int(match.group(1)) > point.global_step:
                later[child.relative_to(run_dir)] = int(match.group(1))
    return later


def set_aside_later_steps(run_dir: Path, point: ResumePoint) -> Path | None:
    """Move what ``run_dir`` holds past the resume point's step (:func:`later_files`) to a sibling
    folder and say so; returns that folder (None: nothing was past it)."""
    later = later_files(run_dir, point)
    if not later:
        return None
    aside = run_dir.with_name(f"{run_dir.name}.abandoned-after-step{point.global_step}-{time_stamp()}")
    for relative in later:
        (aside / relative).parent.mkdir(parents=True, exist_ok=True)
        os.replace(run_dir / relative, aside / relative)
    for record in (RUN_CONFIG, OVERRIDES_FILE, RUN_LOG):
        if (run_dir / record).is_file():
            shutil.copy2(run_dir / record, aside / record)
    checkpoints = sorted(path.name if path.name.startswith("step") else f"{path.name} (step {step})"
                         for path, step in later.items() if path.suffix == ".ckpt")
    validated = sorted({step for path, step in later.items() if path.suffix != ".ckpt"})
    if len(validated) == 1:
        checkpoints.append(f"the denoising history of the validation at step {validated[0]}")
    elif validated:
        checkpoints.append(f"the denoising history of {len(validated)} validations (steps {validated[0]} to "
                           f"{validated[-1]})")
    log.warning("resume: %s is at step %d, before the run's newest checkpoint: the steps after it are trained "
                "again, as another branch; what the run held past step %d is moved to %s: %s%s",
                point.checkpoint, point.global_step, point.global_step, aside, ", ".join(checkpoints),
                "; best.ckpt is chosen afresh from this run's validations"
                if Path(CHECKPOINT_DIR, "best.ckpt") in later else "")
    return aside
