"""The names of the files that say what a folder is, and the kind of folder they make it, in a
module light enough for the command line's hints and the history views, which read them without
loading the code that writes them (torch, Lightning)."""

from __future__ import annotations

from pathlib import Path

import yaml

RUN_CONFIG = "config.yaml"
"""A training run's resolved config (:mod:`xdllm.run.run_directory`)."""
GENERATE_CONFIG = "generate.yaml"
"""A generation folder's resolved settings (:mod:`xdllm.run.generation_record`)."""
SWEEP_PLAN = "sweep.yaml"
"""A sweep's folder: each run's (:mod:`xdllm.run.train_sweep`) or generation's (:mod:`xdllm.run.sweep`)
settings, what ``resume=<sweep>`` reads."""


def folder_kind(folder: Path) -> str | None:
    """What ``folder`` holds, by the files xdllm wrote there: ``training sweep``, ``generation
    sweep``, ``generation``, ``training run``; None for none of them (or a sweep whose plan
    cannot be read: its reader says so)."""
    if (folder / SWEEP_PLAN).is_file():
        try:
            plan = yaml.safe_load((folder / SWEEP_PLAN).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return None
        return "training sweep" if isinstance(plan, dict) and "runs" in plan else (
            "generation sweep" if isinstance(plan, dict) and "checkpoint" in plan else None)
    if (folder / GENERATE_CONFIG).is_file():
        return "generation"
    return "training run" if (folder / RUN_CONFIG).is_file() else None
