"""scripts/bench_history_views.py writes the views of every sample it records and reports them."""

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_history_views.py"


def test_reports_the_views_of_every_recorded_sample(capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_history_views", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    module.main(["--settings", "sort", "--samples", "2", "--repeats", "1"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (result,) = report["results"]
    assert (result["setting"], result["samples"], result["pictures"]) == ("sort", 2, 18)  # 9 steps each
    assert result["views_s"] > 0 and result["generation_s"] > 0
    assert abs(result["per_picture_ms"] - 1000 * result["views_s"] / 18) < 0.1
