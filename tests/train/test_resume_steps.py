"""``trainer.max_steps`` is the step a run ends at: a resume from a checkpoint past it is refused
(nothing would train), one at it says nothing is left to train and runs what follows training."""

import pytest
from tiny_run import TINY

from xdllm.cli.main import main


@pytest.mark.slow
def test_resume_past_or_at_max_steps_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=4", f"run_dir={run}"]) == 0
    capsys.readouterr()
    assert main(["train", f"resume={run}", "trainer.max_steps=2"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert ("last.ckpt is at step 4, past trainer.max_steps=2, the step the run ends at (not a number of steps "
            "more): nothing would train; give trainer.max_steps above 4 to train on") in error
    assert not (run / "generate").exists()

    assert main(["train", f"resume={run}", "generate_after_train=true"]) == 0
    assert ("nothing is left to train: the checkpoint is at trainer.max_steps=4 (give trainer.max_steps above it "
            "to train on)") in capsys.readouterr().err
    assert len(list((run / "generate").glob("*/predictions.jsonl"))) == 1  # what follows training ran
