"""The learning-rate schedules: warmup, then cosine, linear, constant or warmup-stable-decay."""

import math

import pytest
import torch

from xdllm.cli.main import main
from xdllm.train.optim import build_optimizer
from xdllm.train.optim_config import OptimConfig, lr_multiplier


def _multipliers(schedule: str, total: int = 100, **options) -> list[float]:
    config = OptimConfig(warmup_steps=10, min_lr_ratio=0.1, schedule=schedule, **options)
    return [lr_multiplier(step, config, total) for step in range(total + 1)]


@pytest.mark.parametrize("schedule", ["cosine", "linear", "constant", "wsd"])
def test_every_schedule_warms_up_linearly_to_the_full_rate(schedule):
    assert _multipliers(schedule)[:11] == pytest.approx([0.1 * (step + 1) for step in range(10)] + [1.0])


def test_cosine_and_linear_decay_to_the_floor_at_the_last_step():
    cosine, linear = _multipliers("cosine"), _multipliers("linear")
    assert cosine[55] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))  # halfway: 0.55
    assert linear[55] == pytest.approx(0.55) and linear[32] == pytest.approx(0.1 + 0.9 * (1 - 22 / 90))
    assert cosine[100] == pytest.approx(0.1) and linear[100] == pytest.approx(0.1)


def test_constant_stays_and_wsd_decays_over_its_last_fraction():
    assert set(_multipliers("constant")[10:]) == {1.0}
    wsd = _multipliers("wsd", decay_fraction=0.2)
    assert set(wsd[10:81]) == {1.0}  # stable to step 80
    assert wsd[90] == pytest.approx(0.55) and wsd[100] == pytest.approx(0.1)
    longer = _multipliers("wsd", total=200, decay_fraction=0.2)  # trained longer: still stable at 80
    assert longer[100] == 1.0 and longer[200] == pytest.approx(0.1)


def test_the_optimizer_follows_the_configured_schedule():
    model = torch.nn.Linear(2, 2)
    optimizer, scheduler = build_optimizer(model, OptimConfig(lr=0.5, warmup_steps=0, schedule="constant"), 10)
    for _ in range(5):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == 0.5


@pytest.mark.parametrize("override, expected", [
    ("optim.schedule=step", "optim.schedule='step' is not allowed: optim.schedule must be cosine or linear or "
                            "constant or wsd"),
    ("optim.decay_fraction=0", "optim.decay_fraction=0 is not allowed: optim.decay_fraction must be a number > 0 "
                               "and <= 1"),
])
def test_a_wrong_schedule_is_one_line(override, expected, capsys, tmp_path):
    assert main(["train", override, f"run_dir={tmp_path / 'run'}"]) == 2
    assert expected in capsys.readouterr().err
