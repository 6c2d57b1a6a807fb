import pytest

from xdllm.errors import XdllmError
from xdllm.run.checkpoint import resolve_checkpoint, run_dir_of


def test_run_directories_resolve_to_best_for_generation_and_last_for_resume(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "best.ckpt").write_bytes(b"b")
    (checkpoints / "last.ckpt").write_bytes(b"l")
    assert resolve_checkpoint(tmp_path) == checkpoints / "best.ckpt"
    assert resolve_checkpoint(tmp_path, prefer="last") == checkpoints / "last.ckpt"
    (checkpoints / "best.ckpt").unlink()
    assert resolve_checkpoint(tmp_path) == checkpoints / "last.ckpt"
    assert resolve_checkpoint(checkpoints / "last.ckpt", prefer="best") == checkpoints / "last.ckpt"
    assert run_dir_of(checkpoints / "last.ckpt") == tmp_path.resolve()


def test_missing_checkpoints_are_user_errors(tmp_path):
    with pytest.raises(XdllmError, match="checkpoint not found"):
        resolve_checkpoint(tmp_path / "nope.ckpt")
    with pytest.raises(XdllmError, match="no checkpoint in run directory"):
        resolve_checkpoint(tmp_path, prefer="last")
