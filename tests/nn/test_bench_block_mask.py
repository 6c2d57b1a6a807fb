"""scripts/bench_block_mask.py times the two ways of building a BlockMask, after checking they
give the same mask."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_block_mask.py"


def test_the_benchmark_reports_both_builds_of_every_shape_and_rule():
    done = subprocess.run([sys.executable, str(SCRIPT), "--repeats", "1"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["device"] == "cpu"
    assert [(r["rows"], r["length"], r["rule"]) for r in report["results"]] == [
        (8, 2048, "DocumentMask"), (8, 2048, "CausalMask"), (64, 256, "DocumentMask"), (64, 256, "CausalMask")]
    for result in report["results"]:
        assert result["speedup"] == pytest.approx(result["create_block_mask_ms"] / result["from_dense_ms"])


def test_two_builds_that_differ_are_not_timed():
    spec = importlib.util.spec_from_file_location("bench_block_mask", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def build(mask_mod):
        return create_block_mask(mask_mod, B=1, H=None, Q_LEN=256, KV_LEN=256, device="cpu")

    causal = build(lambda b, h, q, kv: q >= kv)
    module.check_same(causal, build(lambda b, h, q, kv: q >= kv), "same")
    with pytest.raises(SystemExit, match="differs from create_block_mask's"):
        module.check_same(causal, build(lambda b, h, q, kv: torch.ones_like(q, dtype=torch.bool)), "where")
