"""Every finished file goes through one atomic writer: the path holds the old content or the
whole new one, and a failed write leaves no temporary file behind."""

import pytest
import torch

from xdllm.temporary_files import (
    torch_save_atomically,
    write_bytes_atomically,
    write_jsonl_atomically,
    write_text_atomically,
    written_atomically,
)


def test_a_write_that_fails_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "config.yaml"
    write_text_atomically(path, "old: 1\n")
    with pytest.raises(RuntimeError, match="disk full"):
        with written_atomically(path) as temporary:
            temporary.write_text("new: half")
            raise RuntimeError("disk full")
    assert path.read_text() == "old: 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_writes_replace_the_file_whole_and_make_its_folder(tmp_path):
    path = tmp_path / "deep" / "state.pt"
    torch_save_atomically({"step": 1}, path)
    torch_save_atomically({"step": 2, "weights": torch.ones(3)}, path)
    assert torch.load(path, weights_only=False)["step"] == 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.pt"]


def test_bytes_replace_the_file_whole(tmp_path):
    path = tmp_path / "pictures" / "sample.png"
    write_bytes_atomically(path, b"old picture")
    write_bytes_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in path.parent.iterdir()) == ["sample.png"]


def test_json_lines_replace_the_file_whole(tmp_path):
    path = tmp_path / "gen" / "predictions.jsonl"
    write_jsonl_atomically(path, [{"a": 1}, {"a": 2}])
    write_jsonl_atomically(path, ({"b": index} for index in range(3)))
    assert path.read_text() == '{"b": 0}\n{"b": 1}\n{"b": 2}\n'
    assert sorted(p.name for p in path.parent.iterdir()) == ["predictions.jsonl"]


class _StoppedFile:
    """A file whose third write is interrupted, as a SIGTERM in one of torch.save's writes is."""

    def __init__(self, path, mode):
        self.file, self.writes = open(path, mode), 0

    def write(self, data):
        self.writes += 1
        if self.writes == 3:
            raise KeyboardInterrupt
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def test_an_interrupt_inside_torch_save_stays_an_interrupt(tmp_path, monkeypatch):
    import torch

    from xdllm import temporary_files

    monkeypatch.setattr(temporary_files, "open", _StoppedFile, raising=False)
    with pytest.raises(KeyboardInterrupt):  # not torch's "unexpected pos" RuntimeError from its cleanup
        temporary_files.torch_save_atomically({"weights": torch.zeros(4096)}, tmp_path / "state.pt")
    assert list(tmp_path.iterdir()) == []
