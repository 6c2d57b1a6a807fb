"""Every TensorBoard scalar of a run is written at the optimizer steps done, the number the console,
checkpoints, history folders and generation scalars use, and a resumed run goes on from there."""

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY

from xdllm.cli.main import main


def _steps(logdir: Path) -> dict[str, list[int]]:
    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [event.step for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_scalars_are_logged_at_the_optimizer_steps_done(trained_run):  # 6 steps, validation every 3
    steps = _steps(trained_run / "tensorboard")
    assert steps["train/loss"] == steps["train/grad_norm"] == [1, 2, 3, 4, 5, 6]
    assert steps["lr-AdamW/pg1"] == [1, 2, 3, 4, 5, 6]
    assert steps["val/loss"] == steps["val/exact_match"] == [3, 6]
    assert "step" not in steps and "epoch" not in steps
    (generation,) = (trained_run / "generate").iterdir()
    assert _steps(generation / "tensorboard")["generate/exact_match"] == [6]


def test_a_resumed_run_continues_the_step_numbers(tmp_path):
    run_dir = tmp_path / "run"
    common = [*TINY, "trainer.val_check_interval=2", f"run_dir={run_dir}"]
    assert main(["train", *common, "trainer.max_steps=2"]) == 0
    assert main(["train", *common, "trainer.max_steps=4", f"resume={run_dir}", "existing_run_dir=refuse"]) == 0
    steps = _steps(run_dir / "tensorboard")
    assert steps["train/loss"] == steps["lr-AdamW/pg1"] == [1, 2, 3, 4]
    assert steps["val/loss"] == [2, 4]
