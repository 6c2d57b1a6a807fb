"""A run resumed from a checkpoint older than its last logged step (killed between a checkpoint
and the next) hides the scalars it logs again: TensorBoard's readers (``EventAccumulator``) kept
both attempts' values at those steps."""

import shutil

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY

from xdllm.cli.main import main


def _loss_steps(run_dir) -> list[int]:
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return [event.step for event in events.Scalars("train/loss")]


def test_scalars_past_the_resumed_checkpoint_are_not_kept_twice(tmp_path):
    run_dir = tmp_path / "run"
    steps = ["trainer.val_check_interval=2", "trainer.log_every_n_steps=1"]
    assert main(["train", *TINY, *steps, "trainer.max_steps=2", f"run_dir={run_dir}"]) == 0
    at_step_2 = tmp_path / "step2.ckpt"
    shutil.copy(run_dir / "checkpoints" / "last.ckpt", at_step_2)
    assert main(["train", f"resume={run_dir}", "trainer.max_steps=4"]) == 0
    assert _loss_steps(run_dir) == [1, 2, 3, 4]
    # killed after logging steps 3 and 4 but before saving them: the newest checkpoint is step 2's
    (run_dir / "checkpoints" / "best.ckpt").unlink()
    shutil.copy(at_step_2, run_dir / "checkpoints" / "last.ckpt")
    assert main(["train", f"resume={run_dir}", "trainer.max_steps=4"]) == 0
    assert _loss_steps(run_dir) == [1, 2, 3, 4]
