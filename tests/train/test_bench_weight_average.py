"""scripts/bench_weight_average.py times an update of the weight average per model size."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_weight_average.py"


def test_reports_the_demo_model_and_its_update_time(capsys):
    spec = importlib.util.spec_from_file_location("bench_weight_average", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--sizes", "demo", "--repeats", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    report = json.loads(lines[-1])
    (result,) = report["results"]
    assert result["size"] == "demo" and result["parameters"] == 799_360  # d_model 128, 4 layers, 46 tokens
    assert result["ms_per_update"] > 0 and "ms per update" in lines[0]
