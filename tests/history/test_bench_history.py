"""scripts/bench_history.py on the sort setting: the three modes timed, the recorder's replayed
time split into its steps and its end, and each mode's memory from a fresh process."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_history.py"


@pytest.mark.slow
def test_the_history_benchmark_splits_the_recorder_s_time_and_measures_each_mode():
    done = subprocess.run([sys.executable, str(SCRIPT), "--settings", "sort", "--repeats", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json.loads(done.stdout.strip().splitlines()[-1])["results"]
    assert (result["setting"], result["steps"], result["k"]) == ("sort", 9, 5)
    assert 0 < result["plugin_steps_s"] < result["plugin_replay_s"]
    assert result["plugin_steps_s"] + result["plugin_end_s"] == pytest.approx(result["plugin_replay_s"], rel=1e-9)
    assert 0 < result["plugin_end_write_s"] < result["plugin_end_s"]
    assert result["overhead_total_pct"] == pytest.approx(100 * (result["topk_s"] - result["off_s"]) / result["off_s"])
    assert result["file_mb_per_batch"] > 0
    assert set(result["memory"]) == {"off", "engine", "topk"}
    # recording allocates what the history keeps: more than the predictor alone
    assert result["memory"]["topk"]["allocated_mib"] > result["memory"]["off"]["allocated_mib"]


def test_without_memory_the_history_benchmark_times_only():
    done = subprocess.run([sys.executable, str(SCRIPT), "--settings", "sort", "--repeats", "1", "--no-memory"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json.loads(done.stdout.strip().splitlines()[-1])["results"]
    assert result["memory"] is None and result["topk_s"] > 0 and "peak RSS" not in done.stdout
