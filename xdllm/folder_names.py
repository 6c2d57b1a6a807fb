"""The names of the files that say what a folder is, the kind of folder they make it, and the
refusal of a ``resume=`` given the other command's folder, in a module light enough for the
command line's hints and the history views, which read them without loading the code that writes
them (torch, Lightning)."""

from __future__ import annotations

from pathlib import Path

import yaml

from xdllm.errors import XdllmError

RUN_CONFIG = "config.yaml"
"""A training run's resolved config (:mod:`xdllm.run.run_directory`)."""
GENERATE_CONFIG = "generate.yaml"
"""A generation folder's resolved settings (:mod:`xdllm.run.generation_record`)."""
CONTINUED_BY = {"training run": "xdllm train", "training sweep": "xdllm train", "generation": "xdllm generate",
                "generation sweep": "xdllm generate"}
"""The command whose ``resume=`` continues each kind of folder."""
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


def refuse_other_kind(folder: str | Path, taken: tuple[str, ...], taker: str) -> None:
    """``resume=folder`` given to a command that takes the ``taken`` kinds of folder: one line
    naming the command that continues the folder's kind (and, for a training run, how to generate
    from it), then ``taker`` (what the command takes). A folder of no known kind is left to the
    command, which says what it lacks."""
    kind = folder_kind(Path(folder).expanduser())
    if kind is None or kind in taken:
        return
    generate = f", or generate from it with xdllm generate ckpt={folder}" if kind == "training run" else ""
    raise XdllmError(f"resume={folder} is a {kind}'s folder: continue it with {CONTINUED_BY[kind]} resume={folder}"
                     f"{generate}; {taker}")
