"""A checkpoint that a full disk cuts short is one line naming the file, the step and how to go on.

torch's zip writer hides the write's ``OSError`` behind its own ``RuntimeError`` ("unexpected
pos ...") when its cleanup fails after it; seen with a real 3 MB and 25 MB tmpfs. Here writes go
to ``/dev/full``, which refuses every write with ENOSPC, as a full disk does.
"""

import builtins
import errno
import os
from pathlib import Path

import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.temporary_files import torch_save_atomically

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


def _checkpoints_to_dev_full(monkeypatch) -> None:
    def open_on_a_full_disk(file, mode="r", *args, **kwargs):
        if "ckpt" in os.fspath(file) and "w" in mode:
            return builtins.open("/dev/full", mode, *args, **kwargs)
        return builtins.open(file, mode, *args, **kwargs)

    monkeypatch.setattr("xdllm.temporary_files.open", open_on_a_full_disk, raising=False)


def test_a_write_the_disk_refuses_is_named_by_the_file_it_was_for(tmp_path, monkeypatch):
    _checkpoints_to_dev_full(monkeypatch)
    target = tmp_path / "last.ckpt"
    with pytest.raises(OSError) as refused:
        torch_save_atomically({"weights": torch.zeros(100_000)}, target)
    assert (refused.value.errno, refused.value.filename) == (errno.ENOSPC, str(target))
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary one


def test_a_failed_write_hidden_behind_the_zip_writers_cleanup_is_found(tmp_path, monkeypatch):
    def save_as_torch_did_on_a_full_tmpfs(obj, handle):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 2932352 vs 2932240")

    monkeypatch.setattr(torch, "save", save_as_torch_did_on_a_full_tmpfs)
    with pytest.raises(OSError) as refused:
        torch_save_atomically({}, tmp_path / "best.ckpt")
    assert (refused.value.errno, refused.value.filename) == (errno.ENOSPC, str(tmp_path / "best.ckpt"))


def test_training_stopped_by_a_full_disk_is_one_line(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    _checkpoints_to_dev_full(monkeypatch)
    assert main(["train", *TINY, "trainer.max_steps=4", "trainer.val_check_interval=4",
                 "checkpoint.last_every_n_steps=2", f"run_dir={run_dir}"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == (f"xdllm: error: No space left on device: {Path(run_dir) / 'checkpoints' / 'last.ckpt'} "
                     "(training stopped at step 2)")
