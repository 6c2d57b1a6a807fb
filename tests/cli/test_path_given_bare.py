"""A path given where an override goes (``xdllm generate runs/a``) is refused with the key that takes it."""

import pytest

from xdllm.cli.main import main
from xdllm.config.override_text import check_override_syntax
from xdllm.errors import XdllmError

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


@pytest.mark.parametrize("command, sweep, given, hint", [
    ("train", False, "runs/a", "; it is a folder: give it as resume=runs/a"),
    ("train", False, "runs/a/checkpoints/best.ckpt", "; it is a file: give it as resume=runs/a/checkpoints/best.ckpt"),
    ("generate", False, "runs/a/checkpoints/best.ckpt",  # eval composes the generate config
     "; it is a file: give it as ckpt=runs/a/checkpoints/best.ckpt"),
    ("generate", False, "runs/a/generate/g", "; it is a folder: give it as resume=runs/a/generate/g"),
    ("generate", False, "copy (1)", "; it is a folder: give it as \"ckpt='copy (1)'\""),
    ("generate", True, "runs/a", "; it is a folder: give it as ckpt=runs/a"),
    ("generate", True, "sw", "; it is a folder: give it as resume=sw"),
    ("train", True, "sw", "; it is a folder: give it as resume=sw"),
    ("train", True, "runs/a", ""),  # a sweep does not continue one run
    ("generate", False, "no/such/folder", ""),
])
def test_a_path_given_alone_is_named_with_its_key(folders, command, sweep, given, hint):
    with pytest.raises(XdllmError) as refused:
        check_override_syntax(["seed=1", given], command, sweep)
    assert str(refused.value) == f"override {given!r} {NOT_AN_OVERRIDE}{hint}"


@pytest.mark.parametrize("command", [["generate"], ["eval"], ["train", "-m"]])
def test_the_commands_pass_their_name_on(folders, capsys, command):
    assert main([*command, "runs/a" if command[0] != "train" else "sw"]) == 2
    key = "resume=sw" if command[0] == "train" else "ckpt=runs/a"
    given = "sw" if command[0] == "train" else "runs/a"
    assert capsys.readouterr().err.strip() == (f"xdllm: error: override {given!r} {NOT_AN_OVERRIDE}; it is a "
                                               f"folder: give it as {key}")
