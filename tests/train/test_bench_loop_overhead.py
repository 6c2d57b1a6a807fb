"""scripts/bench_loop_overhead.py times the host's work between training steps and of a step."""

import importlib.util
from pathlib import Path

from tiny_run import TINY

from xdllm.train.module import DiffusionLMModule

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_loop_overhead.py"


def test_one_gap_per_pair_of_steps_not_across_a_validation():
    spec = importlib.util.spec_from_file_location("bench_loop_overhead", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    between, steps = module.timed_run([*TINY, "trainer.max_steps=8", "trainer.val_check_interval=4"])
    assert len(steps) == 8
    assert len(between) == 6  # 7 pairs of consecutive steps, less the one a validation separates
    assert all(gap > 0 for gap in between) and all(step > 0 for step in steps)
    assert not {"on_validation_start", "on_train_batch_end"} & set(vars(DiffusionLMModule))  # hooks put back
