"""Host time the training loop spends between optimizer steps, against the step itself.

Between one step's ``on_train_batch_end`` and the next ``training_step`` the host runs
Lightning's hooks and logging, takes the next batch from the loader (collating it, without
workers), and moves it to the device. On a GPU that time is hidden behind the device's queued
work only when nothing in between waits for the device: a metric read back every step (as the
progress bar's loss was) makes the GPU idle for all of it. This runs ``xdllm train`` in-process
and prints the median host time between steps and the median host time of a step (forward,
loss, backward, optimizer; on a GPU the host's launch time, which the device's work may exceed).

    python scripts/bench_loop_overhead.py                              # sort_mlm, 200 steps
    python scripts/bench_loop_overhead.py data.num_workers=1 trainer=gpu

Extra arguments are ``xdllm train`` overrides. Prints one JSON line.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from xdllm.cli.main import main as xdllm_main
from xdllm.train.module import DiffusionLMModule

DEFAULTS = ["experiment=sort_mlm", "trainer.max_steps=200", "trainer.val_check_interval=1000",
            "generate_after_train=false", "progress=lines"]


def timed_run(overrides: list[str]) -> tuple[list[float], list[float]]:
    """Host seconds between steps, and of each step, over one in-process ``xdllm train``."""
    between: list[float] = []
    steps: list[float] = []
    marks: dict[str, float] = {}
    training_step = DiffusionLMModule.training_step

    def timed_step(self, *args, **kwargs):
        marks["start"] = time.perf_counter()
        if "end" in marks:
            between.append(marks["start"] - marks["end"])
        return training_step(self, *args, **kwargs)

    def batch_end(self, outputs, batch, batch_idx):
        marks["end"] = time.perf_counter()
        steps.append(marks["end"] - marks["start"])

    def validation_start(self):  # a validation between two steps is not the loop's overhead
        marks.pop("end", None)

    DiffusionLMModule.training_step = timed_step
    DiffusionLMModule.on_train_batch_end = batch_end
    DiffusionLMModule.on_validation_start = validation_start
    try:
        with tempfile.TemporaryDirectory() as folder:
            status = xdllm_main(["train", *DEFAULTS, f"run_dir={Path(folder) / 'run'}", *overrides])
    finally:
        DiffusionLMModule.training_step = training_step
        del DiffusionLMModule.on_train_batch_end, DiffusionLMModule.on_validation_start
    if status != 0:
        raise SystemExit(f"error: xdllm train exited with status {status}")
    return between, steps


def main() -> None:
    overrides = sys.argv[1:]
    between, steps = timed_run(overrides)
    skip = len(steps) // 10  # start-up
    between_ms, step_ms = statistics.median(between[skip:]) * 1e3, statistics.median(steps[skip:]) * 1e3
    print(json.dumps({"bench": "loop_overhead", "overrides": overrides, "steps": len(steps),
                      "between_steps_ms": round(between_ms, 3), "step_ms": round(step_ms, 3),
                      "between_over_step": round(between_ms / step_ms, 4)}))


if __name__ == "__main__":
    main()
