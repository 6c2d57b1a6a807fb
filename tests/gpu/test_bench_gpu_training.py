"""scripts/bench_gpu_training.py runs (a tiny configuration) and prints one JSON line."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_gpu_training.py"
LAYOUTS = ("packed_flex", "nomask", "padded_sdpa")


def _bench_output(capsys, *argv: str):
    spec = importlib.util.spec_from_file_location("bench_gpu_training", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--smoke", *argv])
    return capsys.readouterr()


def _bench(capsys, *argv: str) -> dict:
    lines = _bench_output(capsys, *argv).out.strip().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def test_smoke_run_on_the_cpu_reports_every_layout(capsys):
    report = _bench(capsys, "--device", "cpu")
    assert report["device"] == "cpu" and report["precision"] == "fp32" and report["loss"] == "chunked"
    smoke = report["smoke"]
    for layout in LAYOUTS:
        result = smoke[layout]
        assert result["backend"] == "sdpa"  # no FlexAttention backward off CUDA
        assert result["real_tokens_per_s"] > 0 and 0 < result["utilization"] <= 1 and result["mfu"] > 0
        assert result["peak_memory_gib"] is None and result["compilations"] == 0
    assert smoke["packed_flex"]["utilization"] == smoke["nomask"]["utilization"] > smoke["padded_sdpa"]["utilization"]
    assert smoke["packed_over_padded"] == pytest.approx(
        smoke["packed_flex"]["real_tokens_per_s"] / smoke["padded_sdpa"]["real_tokens_per_s"])
    assert smoke["parameters"] > 0


def test_only_the_layouts_asked_for_run_and_their_figures_reach_stderr_as_each_ends(capsys):
    report = _bench(capsys, "--device", "cpu", "--layouts", "packed_flex", "nomask")
    smoke = report["smoke"]
    assert "padded_sdpa" not in smoke and "packed_over_padded" not in smoke
    assert smoke["packed_over_nomask"] == pytest.approx(
        smoke["packed_flex"]["real_tokens_per_s"] / smoke["nomask"]["real_tokens_per_s"])
    err = _bench_output(capsys, "--device", "cpu", "--layouts", "nomask").err
    progress = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [(line["config"], line["layout"]) for line in progress] == [("smoke", "nomask")]
    assert progress[0]["warmup_steps"] >= 1 and progress[0]["warmup_seconds"] > 0


def test_a_profile_after_the_timing_shares_each_layout_s_step_among_kinds_of_kernel(capsys):
    smoke = _bench(capsys, "--device", "cpu", "--layouts", "packed_flex", "--profile", "2")["smoke"]
    profile = smoke["packed_flex"]["profile"]
    assert profile["steps"] == 2 and profile["timed"] == "CPU operators (own time)"
    assert sum(profile["kinds"].values()) == pytest.approx(1.0) and profile["kinds"]["matmul"] > 0
    assert "attention" in profile["kinds"] and profile["top"]
    assert "profile" not in _bench(capsys, "--device", "cpu", "--layouts", "nomask")["smoke"]["nomask"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_smoke_run_on_cuda_uses_flex_and_compiles_a_bounded_number_of_times():
    # Run as a user runs it: in this process the tests' jaxtyping import hook wraps the network's
    # methods in type checks, and on an H200 with torch 2.11 dynamo traced one of them inside the
    # compiled blocks and the check failed there on a tensor of the right type and shape.
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--device", "cuda", "--compile"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    smoke = report["smoke"]
    assert report["precision"] == "bf16" and smoke["packed_flex"]["backend"] == "flex"
    for layout in LAYOUTS:
        assert smoke[layout]["peak_memory_gib"] > 0
    assert 1 <= smoke["packed_flex"]["compilations"] <= 4
