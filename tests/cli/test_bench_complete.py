"""scripts/bench_complete.py: one-prompt ``xdllm.complete`` calls timed with the run's predictor
reused and with one built per call (the same options, so the same generation)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_complete.py"


def test_the_complete_benchmark_times_both_ways_on_one_run(trained_run):
    done = subprocess.run([sys.executable, str(SCRIPT), str(trained_run), "--calls", "3", "--repeats", "1",
                           "--prompt", "7 6 5 5"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["reused_ms"] > 0 and result["built_per_call_ms"] > 0
    assert result["reused_over_built"] == pytest.approx(result["reused_ms"] / result["built_per_call_ms"], abs=0.01)
    assert len(result["option"]) == 1 and result["threads"] == 1
