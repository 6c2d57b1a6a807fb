"""scripts/bench_compile_time.py compiles the real network at two depths and reports one graph of
the same size for both, and its summary. Compiled with aot_eager (the same graphs, traced
forward and backward, run eagerly): two cold inductor compilations took 80 s of the suite, and
tests/nn/test_model_compile.py runs the network through the real inductor."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_compile_time.py"


@pytest.mark.slow
def test_the_compile_benchmark_reports_one_block_graph_at_every_depth():
    done = subprocess.run([sys.executable, str(SCRIPT), "--layers", "1", "3", "--d-model", "64", "--vocab", "32",
                           "--rows", "2", "--seq-len", "16", "--steps", "1", "--threads", "1",
                           "--backend", "aot_eager"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    *runs, summary = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [(run["layers"], run["mode"]) for run in runs] == [
        (1, "eager"), (1, "compiled"), (3, "eager"), (3, "compiled")]
    compiled = [run for run in runs if run["mode"] == "compiled"]
    assert [run["graphs"] for run in compiled] == [1, 1]
    assert compiled[0]["graph_ops"] == compiled[1]["graph_ops"] > 0
    assert all(run["graphs"] == 0 for run in runs if run["mode"] == "eager")
    assert set(summary["summary"]) == {"1", "3"} and summary["seq_len"] == 16 and summary["backend"] == "aot_eager"
    assert all(figures["compile_s"] > 0 for figures in summary["summary"].values())
