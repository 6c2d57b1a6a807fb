"""scripts/gpu_check.sh (the GPU measurements, in stages) and scripts/step_rate.py (steps per
second from a run's event files), checked on the CPU."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

ROOT = Path(__file__).resolve().parents[2]
GPU_CHECK = ROOT / "scripts" / "gpu_check.sh"


def _step_rate_module():
    spec = importlib.util.spec_from_file_location("step_rate", ROOT / "scripts" / "step_rate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gpu_check(*argv: str, smoke: bool, tmp_path: Path, **env_vars: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "SMOKE": "1" if smoke else "0",
           "CUDA_VISIBLE_DEVICES": "", **env_vars}
    return subprocess.run(["bash", str(GPU_CHECK), *argv], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)


def test_step_rate_reads_wall_times_after_the_first_quarter(tmp_path):
    writer = SummaryWriter(str(tmp_path / "tensorboard"))
    for step in range(10, 101, 10):  # 2 steps per second after step 20; slower start-up before
        writer.add_scalar("train/loss", 1.0, step, walltime=1000.0 + (step * 0.5 if step > 20 else step * 5.0))
    writer.close()
    rate = _step_rate_module().step_rate(tmp_path, None)
    assert rate["from_step"] == 30 and rate["to_step"] == 100
    assert rate["steps_per_s"] == pytest.approx(2.0)


def test_step_rate_lists_each_validation_s_loop_and_the_stall_it_caused(tmp_path):
    writer = SummaryWriter(str(tmp_path / "tensorboard"))
    for step in range(10, 101, 10):  # a second per step, and 12 s more after the validation at 50
        writer.add_scalar("train/loss", 1.0, step, walltime=1000.0 + step + (12.0 if step > 50 else 0.0))
    writer.add_scalar("val/loss", 1.0, 50, walltime=1000.0 + 50 + 7.5)  # its loop: 7.5 s after step 50's loss
    writer.add_scalar("val/loss", 1.0, 55, walltime=2000.0)  # no training loss logged at 55
    writer.close()
    (validation,) = _step_rate_module().step_rate(tmp_path, None)["validations"]
    assert validation == {"step": 50, "metrics_s": 7.5, "stall_s": pytest.approx(12.0)}


def test_step_rate_names_a_folder_that_is_no_run(tmp_path):
    with pytest.raises(SystemExit, match="has no tensorboard folder"):
        _step_rate_module().step_rate(tmp_path, None)


def test_gpu_check_refuses_bad_arguments_and_a_machine_without_cuda(tmp_path):
    usage = _gpu_check("tests", smoke=False, tmp_path=tmp_path)
    assert usage.returncode == 2 and "usage: bash scripts/gpu_check.sh" in usage.stderr
    unknown = _gpu_check("benchmarks", str(tmp_path / "out"), smoke=True, tmp_path=tmp_path)
    assert unknown.returncode == 2 and "unknown stage 'benchmarks'" in unknown.stderr
    no_cuda = _gpu_check("bench-125m", str(tmp_path / "out"), smoke=False, tmp_path=tmp_path)
    assert no_cuda.returncode == 2 and "torch sees no CUDA device" in no_cuda.stderr


def test_gpu_check_smoke_bench_stage_records_the_benchmark_json(tmp_path):
    out = tmp_path / "out"
    done = _gpu_check("bench-125m", str(out), smoke=True, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    (figure,) = [json.loads(line) for line in (out / "bench-125m.json").read_text().splitlines()]
    assert figure["name"] == "bench_smoke" and figure["rc"] == 0
    assert figure["result"]["device"] == "cpu" and figure["result"]["smoke"]["packed_over_padded"] > 0
    assert "### bench_smoke:" in (out / "bench-125m.log").read_text()


def test_past_its_deadline_the_open_stage_skips_every_command_and_says_so(tmp_path):
    out = tmp_path / "out"
    done = _gpu_check("open", str(out), smoke=True, tmp_path=tmp_path, DEADLINE="0")
    assert done.returncode == 0, done.stderr
    figures = [json.loads(line) for line in (out / "open.json").read_text().splitlines()]
    skipped = [figure["name"] for figure in figures if figure.get("skipped") == "past DEADLINE=0"]
    assert skipped[:4] == ["gpu_tests_changed", "block_mask", "step_profile", "varlen_sort_packed_train"]
    assert len(skipped) == 6
    assert {"name": "recompile_limit_warnings", "count": 0} in figures
    assert not (out / "varlen_sort_packed").exists()
    bad = _gpu_check("open", str(out), smoke=True, tmp_path=tmp_path, DEADLINE="ten")
    assert bad.returncode == 2 and "DEADLINE must be a whole number of seconds, got 'ten'" in bad.stderr
