"""A run directory whose run failed before its first checkpoint cannot be resumed: the refusal
says how to start over instead of suggesting resume=."""

from pathlib import Path

import pytest

from xdllm.errors import XdllmError
from xdllm.run.checkpoint import resume_point
from xdllm.run.run_directory import claim_run_dir


def test_refusal_of_a_run_dir_without_checkpoint_says_how_to_start_over(tmp_path: Path):
    run_dir = tmp_path / "run"
    (run_dir / "tensorboard").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(XdllmError) as error:
        claim_run_dir(run_dir, None, "refuse")
    message = str(error.value)
    assert "never saved a checkpoint" in message and "existing_run_dir=move_aside" in message
    assert "resume=" not in message
    with pytest.raises(XdllmError, match=r"never saved one\); start it over without resume=, with existing_run_dir="):
        resume_point(run_dir)


def test_refusal_of_a_run_dir_with_a_checkpoint_still_suggests_resume(tmp_path: Path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"x")
    with pytest.raises(XdllmError, match=f"resume={run_dir}"):
        claim_run_dir(run_dir, None, "refuse")
