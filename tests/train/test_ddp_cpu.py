"""`trainer_strategy=ddp` trains with 2 gloo processes on CPU."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")
def test_ddp_two_processes_on_cpu(tmp_path: Path):
    run_dir = tmp_path / "ddp"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("XDLLM_RUN_DIR", None)
    result = subprocess.run(
        [sys.executable, "-m", "xdllm.cli.main", "train", *TINY, "trainer_strategy=ddp",
         "trainer.max_steps=4", "trainer.val_check_interval=2", f"run_dir={run_dir}"],
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    accumulator = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    samples = accumulator.Scalars("train/samples_seen")
    assert max(event.value for event in samples) == 4 * 8 * 2  # steps x batch x 2 processes
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    config = (run_dir / "config.yaml").read_text()
    assert "strategy: ddp" in config and "devices: 2" in config


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")
def test_ddp_accumulation_all_reduces_once_per_optimizer_step(tmp_path: Path):
    """Micro-batches before a step's last accumulate their gradients locally; only the last
    backward all-reduces (it did after every micro-batch: 4 times the traffic here)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("XDLLM_RUN_DIR", None)
    counter = Path(__file__).with_name("ddp_allreduce_counter.py")
    result = subprocess.run(
        [sys.executable, str(counter), "train", *TINY, "trainer_strategy=ddp", "data.batch_size=2",
         "optim.accumulate_grad_batches=4", "trainer.max_steps=3", "trainer.val_check_interval=3",
         f"run_dir={tmp_path / 'ddp'}"],
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = sorted(set(re.findall(r"rank (\d) all-reduced buckets: (\d+)$", result.stderr, re.M)))
    assert counts == [("0", "3"), ("1", "3")], result.stderr[-2000:]  # 3 steps, one bucket each (a tiny model)
