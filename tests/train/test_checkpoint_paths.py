"""Which checkpoint generation and resume take, and what a corrupt checkpoint does."""

import os

import pytest
import torch

from xdllm.errors import XdllmError
from xdllm.run.checkpoint import resume_point
from xdllm.run.run_checkpoint import read_run_checkpoint, resolve_checkpoint, run_dir_of
from xdllm.temporary_files import remove_stale_temporaries
from xdllm.train.checkpoint_io import CheckpointError, read_checkpoint_file, save_checkpoint_file


def _checkpoint(step: int) -> dict:
    return {"global_step": step, "state_dict": {"w": torch.full((64,), float(step))}, "note": [1, "a"]}


def _flip_a_byte_in_the_tensors(path, step: int = 3):
    data = bytearray(path.read_bytes())
    position = data.find(torch.full((64,), float(step)).numpy().tobytes())  # inside the tensor record
    assert position > 0
    data[position + 5] ^= 0xFF
    path.write_bytes(bytes(data))


def test_generation_takes_best_else_last(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "best.ckpt").write_bytes(b"b")
    (checkpoints / "last.ckpt").write_bytes(b"l")
    assert resolve_checkpoint(tmp_path) == checkpoints / "best.ckpt"
    (checkpoints / "best.ckpt").unlink()
    assert resolve_checkpoint(tmp_path) == checkpoints / "last.ckpt"
    assert resolve_checkpoint(checkpoints) == checkpoints / "last.ckpt"  # the folder of a run's checkpoints
    assert resolve_checkpoint(checkpoints / "last.ckpt") == checkpoints / "last.ckpt"
    assert run_dir_of(checkpoints / "last.ckpt") == tmp_path.resolve()


def test_a_folder_of_runs_names_them(tmp_path):
    for name in ("seed=0", "seed=1"):
        (tmp_path / name / "checkpoints").mkdir(parents=True)
        (tmp_path / name / "checkpoints" / "last.ckpt").write_bytes(b"l")
    with pytest.raises(XdllmError, match=r"is not a run directory but holds runs \(seed=0, seed=1\): give one of "
                                         r"them, e.g. .*seed=0"):
        resolve_checkpoint(tmp_path)


def test_resume_takes_the_newest_valid_checkpoint_and_says_why(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    for name, step in (("best.ckpt", 2), ("last.ckpt", 3), ("step0000004.ckpt", 4), ("step0000001.ckpt", 1)):
        save_checkpoint_file(_checkpoint(step), checkpoints / name)
    point = resume_point(tmp_path)
    assert (point.checkpoint.name, point.global_step) == ("step0000004.ckpt", 4)
    assert "newest valid" in point.reason
    save_checkpoint_file(_checkpoint(5), checkpoints / "step0000005.ckpt")
    _flip_a_byte_in_the_tensors(checkpoints / "step0000005.ckpt", step=5)
    point = resume_point(tmp_path)
    assert (point.checkpoint.name, point.global_step) == ("step0000004.ckpt", 4)
    assert "skipped step0000005.ckpt (step 5: corrupt" in point.reason


def test_a_flipped_byte_is_caught_on_every_read(tmp_path):
    path = tmp_path / "x.ckpt"
    save_checkpoint_file(_checkpoint(3), path)
    assert read_checkpoint_file(path)["global_step"] == 3
    _flip_a_byte_in_the_tensors(path)
    assert torch.load(path, weights_only=False)["global_step"] == 3  # torch alone does not notice
    with pytest.raises(CheckpointError, match=f"checkpoint {path} is corrupt"):
        read_checkpoint_file(path)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=f"could not read checkpoint {path}"):
        read_checkpoint_file(path)
    torch.save({"global_step": 1}, path)
    with pytest.raises(CheckpointError, match="no content digest"):
        read_checkpoint_file(path)


def test_a_history_file_given_as_a_checkpoint_is_named_as_one(tmp_path):
    """It was ``has no content digest: not a checkpoint written by this version of xdllm``."""
    from xdllm.history.format import FORMAT_NAME

    path = tmp_path / "history-00000.pt"
    torch.save({"format": FORMAT_NAME, "version": 1}, path)
    with pytest.raises(CheckpointError, match=f"{path} is a denoising-history file, not a checkpoint: give the run's "
                                              r"folder or one of its checkpoints/\*.ckpt"):
        read_checkpoint_file(path)


def test_an_unreadable_checkpoint_says_what_is_wrong_with_the_file(tmp_path):
    path = tmp_path / "x.ckpt"
    save_checkpoint_file(_checkpoint(3), path)
    whole = path.read_bytes()
    cases = {whole[:len(whole) // 2]: f"cut short: {len(whole) // 2:,} bytes of a torch zip archive without its end",
             b"": "an empty file, 0 bytes",
             b"garbage": "not a torch file: 7 bytes, not a torch zip archive"}
    for content, reason in cases.items():
        path.write_bytes(content)
        with pytest.raises(CheckpointError) as raised:
            read_checkpoint_file(path)
        assert str(raised.value) == f"could not read checkpoint {path}: {reason}"
        (tmp_path / "checkpoints").mkdir(exist_ok=True)
        (tmp_path / "checkpoints" / "last.ckpt").write_bytes(content)
        with pytest.raises(XdllmError) as raised:
            resume_point(tmp_path)
        assert str(raised.value).endswith(f"last.ckpt (unreadable: {reason})")
    with pytest.raises(CheckpointError, match="could not read checkpoint .*gone.ckpt: no such file$"):
        read_checkpoint_file(tmp_path / "gone.ckpt")


def test_a_run_whose_best_checkpoint_is_unreadable_names_its_other_checkpoints(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "best.ckpt").write_bytes(b"")
    save_checkpoint_file(_checkpoint(4), checkpoints / "last.ckpt")
    save_checkpoint_file(_checkpoint(2), checkpoints / "step0000002.ckpt")
    with pytest.raises(CheckpointError, match=f"0 bytes; {checkpoints} also holds last.ckpt, step0000002.ckpt: "
                                              "give one of them by its path$"):
        read_run_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="0 bytes$"):  # the file given is the one wanted
        read_run_checkpoint(checkpoints / "best.ckpt")


def test_missing_checkpoints_are_user_errors(tmp_path):
    with pytest.raises(XdllmError, match="checkpoint not found"):
        resolve_checkpoint(tmp_path / "nope.ckpt")
    with pytest.raises(XdllmError, match="no checkpoint in run directory"):
        resolve_checkpoint(tmp_path)
    with pytest.raises(XdllmError, match="has no checkpoint"):
        resume_point(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"garbage")
    with pytest.raises(XdllmError, match="no valid checkpoint .*last.ckpt \\(unreadable"):
        resume_point(tmp_path)


def test_stale_temporaries_are_removed_but_live_writers_and_finished_files_kept(tmp_path):
    dead = tmp_path / ".last.ckpt.tmp-999999999"
    live = tmp_path / f".best.ckpt.tmp-{os.getppid()}"
    finished = tmp_path / "last.ckpt"
    for path in (dead, live, finished):
        path.write_bytes(b"x")
    assert remove_stale_temporaries(tmp_path) == [dead]
    assert live.exists() and finished.exists() and not dead.exists()
