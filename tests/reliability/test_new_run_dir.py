"""A run trained without ``run_dir`` gets a folder of its own, even when another run started in
the same second, and a run that fails before it starts leaves no empty folder."""

import os
from datetime import datetime

import pytest
from omegaconf import OmegaConf
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.errors import XdllmError
from xdllm.run import new_folder as new_folder_module
from xdllm.run import sweep, train_sweep
from xdllm.run.new_folder import make_new_folder
from xdllm.run.new_run_dir import RUN_DIR_ENV, new_run_dir

SECOND = datetime(2026, 11, 29, 2, 31, 24)


class _FrozenClock(datetime):
    @classmethod
    def now(cls, tz=None):
        return SECOND


@pytest.fixture
def same_second(tmp_path, monkeypatch):
    """Runs started in ``tmp_path`` at one and the same second."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    monkeypatch.setattr(new_folder_module, "datetime", _FrozenClock)
    return tmp_path / "runs" / "sort_mlm"


def test_runs_started_in_the_same_second_each_train_in_a_folder_of_their_own(same_second, capsys):
    """The second was refused: 'run_dir .../20261129-023124 already holds a run' (or, run at once,
    'is in use by a training still running'), so of four runs launched with '&' in a loop two ran."""
    for seed in (0, 1):
        assert main(["train", *TINY, "trainer.max_steps=2", f"seed={seed}"]) == 0
    assert sorted(path.name for path in same_second.iterdir()) == ["20261129-023124", "20261129-023124-2"]
    for folder, seed in zip(sorted(same_second.iterdir()), (0, 1)):
        assert OmegaConf.load(folder / "config.yaml").seed == seed
        assert (folder / "checkpoints" / "last.ckpt").is_file()
    assert RUN_DIR_ENV not in os.environ  # a later run of the process names its own


def test_a_run_that_fails_before_it_starts_leaves_no_folder(same_second, capsys):
    assert main(["train", *TINY, "model.n_heads=3"]) == 2
    assert "not divisible by n_heads=3" in capsys.readouterr().err
    assert not (same_second.parent).exists()  # runs/ was made for it, and removed with it
    kept = same_second / "an earlier run"
    kept.mkdir(parents=True)
    assert main(["train", *TINY, "model.n_heads=3"]) == 2
    assert [path.name for path in same_second.iterdir()] == ["an earlier run"]


def test_a_named_resumed_or_started_run_makes_no_folder(same_second, monkeypatch):
    config = OmegaConf.create({"run_dir": None, "name": "sort_mlm"})
    with new_run_dir(config, resume="runs/x"), new_run_dir(OmegaConf.create({"run_dir": "a", "name": "b"}), None):
        assert RUN_DIR_ENV not in os.environ
    monkeypatch.setenv(RUN_DIR_ENV, "/shared/by/the/launcher")  # a process DDP started
    with new_run_dir(config, resume=None):
        assert os.environ[RUN_DIR_ENV] == "/shared/by/the/launcher"
    assert not same_second.parent.exists()


def test_a_new_folder_of_a_taken_name_is_numbered(tmp_path):
    made = [make_new_folder(tmp_path / "generate", "20261129-023124_threshold=0.9") for _ in range(3)]
    assert [folder.name for folder in made] == ["20261129-023124_threshold=0.9", "20261129-023124_threshold=0.9-2",
                                                "20261129-023124_threshold=0.9-3"]
    assert all(folder.is_dir() for folder in made)


def test_generation_sweeps_started_in_the_same_second_each_get_a_folder(tmp_path, monkeypatch):
    """The second ended in '[Errno 17] File exists: .../generate/sweep-20261129-023124'."""
    monkeypatch.setattr(new_folder_module, "datetime", _FrozenClock)
    first, second = (sweep._sweep_dir(None, tmp_path / "run")[0] for _ in range(2))
    assert (first.name, second.name) == ("sweep-20261129-023124", "sweep-20261129-023124-2")


def test_training_sweeps_started_in_the_same_second_each_get_a_folder(same_second, monkeypatch):
    """Both planned runs/<name>/sweep-<time>; the second then found the first's sweep.yaml."""
    first, second = (train_sweep.plan_sweep([*TINY, "seed=0,1"])[0] for _ in range(2))
    assert (first.name, second.name) == ("sweep-20261129-023124", "sweep-20261129-023124-2")
    with pytest.raises(XdllmError, match="not divisible by n_heads=3"):
        train_sweep.plan_sweep([*TINY, "model.n_heads=2,3"])
    assert sorted(path.name for path in same_second.iterdir()) == [first.name, second.name]  # none left by it
