"""scripts/bench_block_decoding.py runs every family it offers and counts the network's tokens."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_block_decoding.py"

# 8 tokens in blocks of 4 after [bos]: the prompt pass (1 token), then per block the passes over
# its 4 tokens (bd3lm and udlm 4 steps, hybrid 3 fill passes after the seed) and the first
# block's append (4); per generated token.
CACHED_TOKENS_RUN = {"bd3lm": (1 + 2 * 16 + 4) / 8, "udlm": (1 + 2 * 16 + 4) / 8, "hybrid": (1 + 2 * 12 + 4) / 8}


def _bench(capsys, family: str) -> dict:
    spec = importlib.util.spec_from_file_location("bench_block_decoding", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--family", family, "--lengths", "8", "--block-sizes", "4", "--batch-size", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


@pytest.mark.parametrize("family", sorted(CACHED_TOKENS_RUN))
def test_each_family_reports_its_cached_decoding(capsys, family):
    report = _bench(capsys, family)
    assert report["family"] == family and report["batch_size"] == 2
    (result,) = report["results"]
    assert (result["length"], result["block_size"]) == (8, 4)
    assert result["cached_tokens_run_per_token"] == pytest.approx(CACHED_TOKENS_RUN[family], abs=0.01)
    assert result["cached_ms_per_token"] > 0 and result["cached_cpu_ms_per_token"] > 0
    if family == "bd3lm":  # the one family with a recomputing mode, checked to give the same tokens
        assert report["modes"] == ["cached", "recomputed"]
        assert result["tokens_run_ratio"] == pytest.approx(
            result["recomputed_tokens_run_per_token"] / result["cached_tokens_run_per_token"], abs=0.01)
        assert result["tokens_run_ratio"] > 1
    else:
        assert report["modes"] == ["cached"] and "time_ratio" not in result
