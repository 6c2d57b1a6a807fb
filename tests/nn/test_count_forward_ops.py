"""scripts/count_forward_ops.py counts the operations of a forward pass and a training step: the
same for every layer (the count is exact, not timed), more with gradients than without."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "count_forward_ops.py"
_spec = importlib.util.spec_from_file_location("count_forward_ops", SCRIPT)
count_forward_ops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(count_forward_ops)


def _counts(capsys, layers: int) -> dict:
    count_forward_ops.main(["--d-model", "32", "--layers", str(layers), "--heads", "2", "--rows", "2",
                            "--seq-len", "8"])
    return json.loads(capsys.readouterr().out)


def test_each_layer_adds_the_same_operations_and_training_runs_more(capsys):
    one, two, three = (_counts(capsys, layers) for layers in (1, 2, 3))
    for key in ("forward_ops", "training_step_ops"):
        assert three[key] - two[key] == two[key] - one[key] > 0
    assert one["training_step_ops"] > 2 * one["forward_ops"]
    assert (one["layers"], one["rows"], one["seq_len"], one["bf16"]) == (1, 2, 8, False)
