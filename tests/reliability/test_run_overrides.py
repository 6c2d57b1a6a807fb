"""A run stores the overrides it was composed from; `resume=<run>` alone continues it as it was,
and overrides given with it come after the stored ones."""

import pytest
import yaml
from omegaconf import OmegaConf
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.errors import XdllmError
from xdllm.run.run_overrides import OVERRIDES_FILE, with_stored_overrides


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("overrides") / "run"
    assert main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", "model.d_model=16",
                 f"run_dir={run_dir}"]) == 0
    return run_dir


def test_the_run_stores_its_overrides_without_run_dir(stored_run):
    stored = yaml.safe_load((stored_run / OVERRIDES_FILE).read_text())
    assert stored == [*TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", "model.d_model=16"]


def test_resume_alone_composes_the_stored_config_and_later_overrides_win(stored_run, capsys):
    assert main(["train", f"resume={stored_run}", "trainer.max_steps=4", "--cfg"]) == 0
    config = OmegaConf.create(capsys.readouterr().out)
    assert config.model.d_model == 16 and config.trainer.max_steps == 4 and config.data.batch_size == 8


def test_resume_alone_continues_the_run_in_its_directory(stored_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # from another folder: the stored overrides hold no run_dir
    assert main(["train", f"resume={stored_run / 'checkpoints' / 'last.ckpt'}", "trainer.max_steps=3"]) == 0
    assert f"run directory: {stored_run}" in capsys.readouterr().out
    assert not (tmp_path / "runs").exists()


def test_a_run_without_stored_overrides_and_a_broken_file(tmp_path):
    assert with_stored_overrides(str(tmp_path), ["a=1"]) == ["a=1"]
    assert with_stored_overrides(None, ["a=1"]) == ["a=1"]
    (tmp_path / OVERRIDES_FILE).write_text("a: 1\n")
    with pytest.raises(XdllmError, match="must hold a list of overrides"):
        with_stored_overrides(str(tmp_path), [])
