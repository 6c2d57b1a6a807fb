"""Resuming from a checkpoint continues the exact loss curve of an uninterrupted run."""

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY

from xdllm.cli.main import main


def _train_losses(run_dir: Path) -> dict[int, float]:
    accumulator = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {event.step: event.value for event in accumulator.Scalars("train/loss")}


@pytest.mark.slow
def test_resume_reproduces_the_uninterrupted_loss_curve(tmp_path):
    common = [*TINY, "trainer.max_steps=8", "trainer.val_check_interval=4",
              "checkpoint.save_every_n_steps=4"]
    full = tmp_path / "full"
    assert main(["train", *common, f"run_dir={full}"]) == 0
    snapshot = full / "checkpoints" / "step0000004.ckpt"
    assert snapshot.is_file()

    resumed = tmp_path / "resumed"
    assert main(["train", *common, f"run_dir={resumed}", f"resume={snapshot}"]) == 0

    uninterrupted, continued = _train_losses(full), _train_losses(resumed)
    assert sorted(uninterrupted) == list(range(1, 9))
    assert sorted(continued) == [5, 6, 7, 8]
    for step in continued:
        assert continued[step] == pytest.approx(uninterrupted[step], abs=1e-6), step
    assert len({round(v, 6) for v in continued.values()}) > 1  # the curve moves: a real check
