"""scripts/bench_sampling.py times every sampling setting and checks the lookup against its definition."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_sampling.py"


def _module():
    spec = importlib.util.spec_from_file_location("bench_sampling", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reports_every_setting_per_vocabulary(capsys):
    _module().main(["--vocab", "46", "300", "--batch", "2", "--positions", "3", "--repeats", "1"])
    (line,) = capsys.readouterr().out.strip().splitlines()
    report = json.loads(line)
    assert [r["vocab"] for r in report["results"]] == [46, 300]
    for result in report["results"]:
        for name in ("argmax", "sample", "top_k_50", "top_p_0.9", "top_p_0.9_peaked", "lookup", "counted_lookup"):
            assert result[f"{name}_ms"] > 0
        assert result["counted_over_lookup"] > 0


def test_the_counted_reference_is_the_inverse_cdf_definition():
    import torch
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5]]).expand(4, -1)
    draws = torch.tensor([0.0, 0.49, 0.5, 0.999])
    assert _module().counted_choice(probs, draws).tolist() == [1, 1, 3, 3]
