"""Killed at a random moment, training and generation leave only whole files, and a resumed run
continues from the newest state. Bounded: two kills of training and one of generation, at seeded random times."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_run import TINY

from xdllm.history import read_history_file
from xdllm.train.checkpoint_io import read_checkpoint_file

TRAIN = [sys.executable, "-m", "xdllm.cli.main", "train", *TINY, "trainer.max_steps=400",
         "trainer.val_check_interval=50", "checkpoint.last_every_n_steps=3", "checkpoint.save_every_n_steps=9"]


def _env() -> dict:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("XDLLM_RUN_DIR", None)
    return env


def _kill_after(command: list[str], seconds: float, ready: Path) -> None:
    """Start ``command``, wait until ``ready`` exists, then ``seconds`` more, then SIGKILL it."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
    deadline = time.monotonic() + 120
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(seconds)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


def _finished_files_are_whole(checkpoints: Path) -> dict[str, int]:
    steps = {}
    for path in checkpoints.glob("*.ckpt"):
        steps[path.name] = int(read_checkpoint_file(path)["global_step"])  # raises if torn
    return steps


@pytest.mark.slow
def test_training_killed_at_random_moments_resumes_from_the_newest_state(tmp_path):
    rng = random.Random(7)
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    for attempt in range(2):
        resume = [f"resume={run_dir}"] if attempt else []
        _kill_after([*TRAIN, f"run_dir={run_dir}", *resume], rng.uniform(1.0, 4.0), checkpoints / "last.ckpt")
        steps = _finished_files_are_whole(checkpoints)
        # last.ckpt is rewritten every 3 steps; best.ckpt, written at a validation (every 50), may
        # be up to 2 steps newer when the kill came between the two
        assert 0 <= max(steps.values()) - steps["last.ckpt"] < 3
    newest = max(_finished_files_are_whole(checkpoints).values())
    result = subprocess.run([*TRAIN[:-4], "trainer.max_steps=" + str(newest + 3), "trainer.val_check_interval=50",
                             "checkpoint.last_every_n_steps=3", f"run_dir={run_dir}", f"resume={run_dir}"],
                            capture_output=True, text=True, env=_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"(step {newest})" in result.stderr  # it said which checkpoint it took
    assert _finished_files_are_whole(checkpoints)["last.ckpt"] == newest + 3
    assert not list(checkpoints.glob(".*"))  # the killed runs' temporaries were cleaned up


@pytest.mark.slow
def test_generation_killed_at_random_moments_leaves_only_whole_files(tmp_path):
    run_dir = tmp_path / "run"
    assert subprocess.run([*TRAIN[:-4], "trainer.max_steps=2", "trainer.val_check_interval=2",
                           f"run_dir={run_dir}"], env=_env(), capture_output=True, timeout=300).returncode == 0
    rng = random.Random(11)
    for attempt in range(1):
        output = tmp_path / f"gen{attempt}"
        command = [sys.executable, "-m", "xdllm.cli.main", "generate", f"ckpt={run_dir}", "split=validation",
                   "batch_size=1", "history=topk", f"output_dir={output}"]
        _kill_after(command, rng.uniform(0.0, 1.5), output / "history")
        for path in (output / "history").glob("*.pt"):
            read_history_file(path)  # raises if torn
        predictions = output / "predictions.jsonl"
        if predictions.exists():
            assert all(json.loads(line) for line in predictions.read_text().splitlines())
