"""A run resumed with other ``optim.*`` values trains with them: the checkpoint's optimizer and
schedule carry the saving run's learning rate, weight decay, betas and eps, which the resumed
run's settings replace (its moments are kept)."""

from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.train.optim_config import OptimConfig, lr_multiplier

COMMON = [*TINY, "checkpoint.save_every_n_steps=4"]


def _learning_rates(run_dir: Path) -> dict[int, float]:
    accumulator = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {event.step: event.value for event in accumulator.Scalars("lr-AdamW/pg1")}


@pytest.mark.slow
def test_resumed_run_trains_with_its_own_optimizer_settings(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *COMMON, "trainer.max_steps=4", f"run_dir={run}"]) == 0
    capsys.readouterr()
    assert main(["train", f"resume={run}", "trainer.max_steps=8", "optim.lr=0.004", "optim.weight_decay=0.2",
                 "optim.beta2=0.95"]) == 0
    assert ("resume: optim.lr 0.001 -> 0.004, optim.weight_decay 0.01 -> 0.2, optim.beta2 0.98 -> 0.95"
            in capsys.readouterr().err)

    config = OptimConfig(lr=0.004, warmup_steps=2)
    rates = _learning_rates(run)
    for step in range(5, 9):  # the rate logged at step n is the one optimizer step n - 1 used
        assert rates[step] == pytest.approx(config.lr * lr_multiplier(step - 1, config, 8), rel=1e-6), step
    saved = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    decay_group, no_decay_group = saved["optimizer_states"][0]["param_groups"]
    assert (decay_group["weight_decay"], no_decay_group["weight_decay"]) == (0.2, 0.0)
    assert decay_group["betas"] == (0.9, 0.95)
    assert saved["lr_schedulers"][0]["base_lrs"] == [0.004, 0.004]


@pytest.mark.slow
def test_resume_given_more_steps_follows_the_longer_schedule_from_its_first_step(tmp_path, capsys):
    """The restored rate of step 5 was the 4-step schedule's last (lr * min_lr_ratio)."""
    run = tmp_path / "run"
    assert main(["train", *COMMON, "trainer.max_steps=4", f"run_dir={run}"]) == 0
    capsys.readouterr()
    assert main(["train", f"resume={run}", "trainer.max_steps=6"]) == 0
    assert "resume: optim" not in capsys.readouterr().err
    config = OptimConfig(warmup_steps=2)
    rates = _learning_rates(run)
    for step in (5, 6):
        assert rates[step] == pytest.approx(config.lr * lr_multiplier(step - 1, config, 6), rel=1e-6), step
