"""A path given where an override goes (``xdllm generate runs/a``) is refused with the key that takes it."""

import pytest

from xdllm.cli.main import main

NOT_AN_OVERRIDE = "is not KEY=VALUE (nor ~KEY, which deletes a key)"


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """A run folder with a checkpoint, a generation folder, a sweep folder, a folder needing quotes."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/a/checkpoints").mkdir(parents=True)
    (tmp_path / "runs/a/checkpoints/best.ckpt").write_bytes(b"")
    (tmp_path / "runs/a/generate/g").mkdir(parents=True)
    (tmp_path / "runs/a/generate/g/generate.yaml").write_text("ckpt: x\n")
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw/sweep.yaml").write_text("overrides: []\n")
    (tmp_path / "copy (1)").mkdir()


@pytest.mark.parametrize("command, given, hint", [
    (["train"], "runs/a", "; it is a folder: give it as resume=runs/a"),
    (["train"], "runs/a/checkpoints/best.ckpt", "; it is a file: give it as resume=runs/a/checkpoints/best.ckpt"),
    (["generate"], "runs/a", "; it is a folder: give it as ckpt=runs/a"),
    (["eval"], "runs/a/checkpoints/best.ckpt", "; it is a file: give it as ckpt=runs/a/checkpoints/best.ckpt"),
    (["generate"], "runs/a/generate/g", "; it is a folder: give it as resume=runs/a/generate/g"),
    (["generate"], "copy (1)", "; it is a folder: give it as \"ckpt='copy (1)'\""),
    (["generate", "-m"], "runs/a", "; it is a folder: give it as ckpt=runs/a"),
    (["generate", "-m"], "sw", "; it is a folder: give it as resume=sw"),
    (["train", "-m"], "sw", "; it is a folder: give it as resume=sw"),
    (["train", "-m"], "runs/a", ""),  # a sweep does not continue one run
    (["generate"], "no/such/folder", ""),
])
def test_a_path_given_alone_is_named_with_its_key(folders, capsys, command, given, hint):
    assert main([*command, given]) == 2
    assert capsys.readouterr().err.strip() == f"xdllm: error: override {given!r} {NOT_AN_OVERRIDE}{hint}"
