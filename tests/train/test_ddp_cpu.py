"""`trainer_strategy=ddp` trains with 2 gloo processes on CPU."""

import os
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
