"""A resume whose validation measures something else than the run's did (another task or task
length, other data, another validation set, predictor, evaluator, judge or monitored metric)
would compare its scores with ``best.ckpt``'s, which came from the old measure: after a resume
from a sort run of length 8 with ``task.params.length=12``, ``best.ckpt`` stayed the length-8
checkpoint (0.96 exact match there; 0.29 to 0.32 at length 12 at the resumed validation) and the
generation after training reported 0.97, on the length-8 test split its config holds. So the old
``best.ckpt`` is kept as ``best-before-step<S>.ckpt`` and ``best.ckpt`` is chosen afresh from the
resumed run's validations (:class:`xdllm.train.best_checkpoint.NewestOnTieCheckpoint` forgets a
best state whose file is gone)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xdllm.config.flat_keys import flat_keys
from xdllm.run.checkpoint import ResumePoint
from xdllm.run.run_checkpoint import CHECKPOINT_DIR, run_dir_of

log = logging.getLogger(__name__)

MEASURE_KEYS = ("task", "seed", "data.num_val_samples", "data.validation_roles", "predictor", "evaluator", "judge",
                "text_samples_temperature", "checkpoint.monitor", "checkpoint.mode")
"""What a run's validation scores depend on, in its resolved config (the data's and the
``validation_choices`` file's content are compared by their digests)."""


def _lookup(config: Mapping[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(config, Mapping):
            return None
        config = config.get(part)
    return config


def _flat_at(config: Mapping[str, Any], dotted: str) -> dict[str, Any]:
    """The leaves under ``dotted`` by their dotted keys (a leaf there: itself)."""
    value = _lookup(config, dotted)
    return flat_keys(value, f"{dotted}.") if isinstance(value, Mapping) else {dotted: value}


def _is_a_path(key: str) -> bool:
    """A task parameter naming a file or folder: compared by the data's digest instead (moved
    data is the same data)."""
    name = key.rsplit(".", 1)[-1]
    return name == "path" or name.endswith(("_path", "_file", "_dir"))


def measure_changes(recorded: Mapping[str, Any], resolved: Mapping[str, Any], other_data: bool = False,
                    other_choices: bool = False) -> list[str]:
    """What the resumed run's validation measures differently from the run that saved the
    checkpoint (``recorded``: its resolved config), as ``KEY old -> new``; ``other_data`` and
    ``other_choices``: the task's data or the ``validation_choices`` file changed (by digest)."""
    changes = []
    for dotted in MEASURE_KEYS:
        before, after = _flat_at(recorded, dotted), _flat_at(resolved, dotted)
        for key in sorted(before.keys() | after.keys()):
            if before.get(key) == after.get(key) or (dotted == "task" and _is_a_path(key)):
                continue
            one_side = before if key in before else after
            if (key in before) != (key in after) and not one_side[key]:
                continue  # an option one side's xdllm lacks, at its off value (false, 0, null): unchanged
            changes.append(f"{key} {before.get(key)} -> {after.get(key)}")
    if (_lookup(recorded, "validation_choices") is None) != (_lookup(resolved, "validation_choices") is None):
        changes.append(f"validation_choices {_lookup(recorded, 'validation_choices')} -> "
                       f"{_lookup(resolved, 'validation_choices')}")
    changes += ["the task's data"] * other_data + ["the validation_choices questions"] * other_choices
    return changes


def restart_best_if_measure_changed(run_dir: Path, point: ResumePoint, changes: list[str]) -> Path | None:
    """Keep the run's ``best.ckpt`` as ``best-before-step<S>.ckpt`` when the resumed validation
    measures something else (``changes``, :func:`measure_changes`), and say so; returns the kept
    file (None: nothing changed, or the run has no best checkpoint)."""
    best = run_dir / CHECKPOINT_DIR / "best.ckpt"
    if not changes or run_dir_of(point.checkpoint) != run_dir or not best.is_file():
        return None
    kept = best.with_name(f"best-before-step{point.global_step}.ckpt")
    os.replace(best, kept)
    log.warning("resume: validation measures something else from step %d on (%s): best.ckpt, chosen by the old "
                "measure, is kept as %s, and best.ckpt is chosen afresh from this run's validations",
                point.global_step, ", ".join(changes), kept)
    return kept
