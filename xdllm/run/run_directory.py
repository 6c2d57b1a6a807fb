"""A training run's directory: where it is, who may use it, and what is written into it first.

A run directory belongs to one run. ``resolve_run_dir`` names it (``run_dir``, the run being
resumed, or a new run's ``runs/<name>/<time>``, made by :mod:`xdllm.run.new_run_dir`);
``claim_run_dir`` refuses (or moves aside) a directory that holds another run; ``prepare_run_dir``
clears what interrupted writes left and writes the run's ``config.yaml`` and ``overrides.yaml``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xdllm.config.override_text import shell_word
from xdllm.errors import XdllmError
from xdllm.folder_names import RUN_CONFIG
from xdllm.run.checkpoint import ResumePoint
from xdllm.run.new_run_dir import RUN_DIR_ENV
from xdllm.run.run_checkpoint import CHECKPOINT_DIR, run_dir_of
from xdllm.run.run_overrides import save_overrides
from xdllm.temporary_files import remove_stale_temporaries, write_text_atomically

log = logging.getLogger(__name__)


def resolve_run_dir(config: DictConfig, resume: ResumePoint | None = None) -> Path:
    """``run_dir`` if set; else the run being resumed; else the new run's folder, shared by every
    DDP process through the environment."""
    if config.run_dir is not None:
        return Path(config.run_dir).expanduser().resolve()
    if resume is not None:
        return run_dir_of(resume.checkpoint)
    return Path(os.environ[RUN_DIR_ENV])  # made by xdllm.run.new_run_dir for the run, or its launcher


EXISTING_RUN_DIR_CHOICES = ("refuse", "move_aside")
RUN_CONTENT = (RUN_CONFIG, CHECKPOINT_DIR, "tensorboard", "history", "generate")


def claim_run_dir(run_dir: Path, resume: ResumePoint | None, policy: str) -> None:
    """A run directory belongs to one run: one that already holds a run is refused (or, with
    ``existing_run_dir=move_aside``, moved to ``<run_dir>.moved-<time>``) unless this run
    resumes from a checkpoint of that same directory."""
    if policy not in EXISTING_RUN_DIR_CHOICES:
        raise XdllmError(f"existing_run_dir must be one of {', '.join(EXISTING_RUN_DIR_CHOICES)}, "
                         f"got {policy!r}")
    held = [name for name in RUN_CONTENT if (run_dir / name).exists()]
    if not held or (resume is not None and run_dir_of(resume.checkpoint) == run_dir):
        return
    if policy == "refuse" and not any((run_dir / CHECKPOINT_DIR).glob("*.ckpt")):
        raise XdllmError(f"run_dir {run_dir} holds a run that never saved a checkpoint ({', '.join(held)}), so "
                         "it cannot be resumed; start over with existing_run_dir=move_aside (the old files go to "
                         f"{run_dir.name}.moved-<time>) or choose another run_dir")
    if policy == "refuse":
        raise XdllmError(f"run_dir {run_dir} already holds a run ({', '.join(held)}); resume it with "
                         f"{shell_word(f'resume={run_dir}')}, choose another run_dir, or pass "
                         "existing_run_dir=move_aside")
    moved = run_dir.with_name(f"{run_dir.name}.moved-{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}")
    os.replace(run_dir, moved)
    log.info("run_dir %s held an earlier run: moved it to %s", run_dir, moved)


def prepare_run_dir(run_dir: Path, resolved: dict[str, Any], overrides: Sequence[str]) -> None:
    """Clear what interrupted writes left, and write the run's ``config.yaml`` and ``overrides.yaml``."""
    history = run_dir / "history"
    nested = [path for path in history.rglob("*") if path.is_dir()] if history.is_dir() else []
    for folder in (run_dir, run_dir / CHECKPOINT_DIR, history, *nested):
        for stale in remove_stale_temporaries(folder):
            log.info("removed %s, left by an interrupted write", stale)
    write_text_atomically(run_dir / RUN_CONFIG, OmegaConf.to_yaml(OmegaConf.create(resolved), resolve=True))
    # without resume= and run_dir=: resuming this run continues it here, from any folder
    save_overrides(run_dir, [o for o in overrides if not o.startswith(("resume=", "run_dir="))])
