"""Optimizer steps per second of a training run, read from its TensorBoard event files.

The rate is taken between the ``train/loss`` scalars written after the first ``--skip`` steps (so
start-up, loader processes coming up and compilation are left out) and the last one, from the
wall times TensorBoard recorded with them; the run's log interval (``trainer.log_every_n_steps``)
sets how many points there are. The rate includes the validations in that span; each
validation is listed too (``validations``, at steps whose training loss was logged):
``metrics_s``, from the ``train/loss`` point of its step to its ``val/loss`` point (the
validation loop), and ``stall_s``, how much longer training took to its next ``train/loss``
point than those steps take without a validation (the median pace between points with none):
the validation loop, checkpoints and whatever else the validation made training wait for (the
history views, when they are drawn in the training process).

    python scripts/step_rate.py runs/sudoku_mlm_gpu            # {"steps_per_s": ..., ...}
    python scripts/step_rate.py runs/sudoku_mlm_gpu --skip 100

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

SCALAR = "train/loss"
VALIDATION_SCALAR = "val/loss"


def step_rate(run_dir: Path, skip: int | None) -> dict:
    """Steps per second between the first ``train/loss`` point past ``skip`` (default: a quarter of
    the last logged step) and the last one."""
    logdir = run_dir / "tensorboard"
    if not logdir.is_dir():
        raise SystemExit(f"error: {run_dir} has no tensorboard folder (is it a training run directory?)")
    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    if SCALAR not in events.Tags()["scalars"]:
        raise SystemExit(f"error: {logdir} has no '{SCALAR}' scalars (did training log a step?)")
    points = events.Scalars(SCALAR)
    if skip is None:
        skip = points[-1].step // 4
    points = [p for p in points if p.step > skip]
    if len(points) < 2:
        raise SystemExit(f"error: {logdir} has {len(points)} '{SCALAR}' points after step {skip}; "
                         "train longer or pass a smaller --skip")
    first, last = points[0], points[-1]
    seconds = last.wall_time - first.wall_time
    return {"steps_per_s": (last.step - first.step) / seconds, "from_step": first.step,
            "to_step": last.step, "seconds": seconds, "validations": validation_seconds(events)}


def validation_seconds(events: EventAccumulator) -> list[dict]:
    """Each validation's ``metrics_s`` and ``stall_s`` (module docstring)."""
    if VALIDATION_SCALAR not in events.Tags()["scalars"]:
        return []
    trained = events.Scalars(SCALAR)
    at = {point.step: index for index, point in enumerate(trained)}
    validated = [point for point in events.Scalars(VALIDATION_SCALAR) if point.step in at]
    paces = [(b.wall_time - a.wall_time) / (b.step - a.step) for a, b in zip(trained, trained[1:])
             if not any(a.step <= v.step < b.step for v in validated)]
    pace = statistics.median(paces) if paces else None
    listed = []
    for point in validated:
        index = at[point.step]
        entry = {"step": point.step, "metrics_s": point.wall_time - trained[index].wall_time, "stall_s": None}
        if pace is not None and index + 1 < len(trained):
            after = trained[index + 1]
            entry["stall_s"] = after.wall_time - trained[index].wall_time - pace * (after.step - point.step)
        listed.append(entry)
    return listed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a training run directory")
    parser.add_argument("--skip", type=int, default=None,
                        help="steps left out at the start (default: a quarter of the logged steps)")
    args = parser.parse_args(argv)
    json.dump(step_rate(args.run_dir, args.skip), sys.stdout)
    print()


if __name__ == "__main__":
    main()
