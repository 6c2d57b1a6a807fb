"""A run records the paths it was given as absolute, and where its family came from, so
generate, eval and resume work from any directory and without $XDLLM_MODEL_PATH."""

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from model_package_factory import write_model_package
from omegaconf import OmegaConf
from tiny_run import TINY_RUN

from xdllm.cli.main import main
from xdllm.config.compose import REPOSITORY, compose_config, search_path_override
from xdllm.config.run_paths import absolute_generate_paths, record_absolute_paths
from xdllm.data.prepare import PrepareOptions, prepare

SMALL = ["trainer.max_steps=2", "trainer.val_check_interval=2", "data.batch_size=4", "data.num_val_samples=4",
         "data.num_test_samples=4", "data.eval_batch_size=4", "history.num_samples=0", "generate_after_train=false",
         "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "torch_threads=1"]


def test_relative_paths_become_absolute_in_the_config_and_the_stored_overrides(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fams").mkdir()
    overrides = ["task=prepared", "task.params.path=prep", "tokenizer=tok.json", "+frozen.target=runs/t",
                 "model_search_path=[fams]"]
    config = compose_config("train", overrides)
    stored = record_absolute_paths(config, overrides)
    assert (config.tokenizer, config.task.params.path, config.frozen.target) == (
        f"{tmp_path}/tok.json", f"{tmp_path}/prep", f"{tmp_path}/runs/t")
    assert list(config.model_search_path) == [str((tmp_path / "fams").resolve())]
    assert stored == ["task=prepared", f"task.params.path={tmp_path}/prep", f"tokenizer={tmp_path}/tok.json",
                      f"+frozen.target={tmp_path}/runs/t", f"model_search_path=[{(tmp_path / 'fams').resolve()}]"]


def test_a_path_given_straight_to_a_family_component_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # loss.cache_dir and collator.train.vocab_file are made up to stand for any path a component
    # may take: the keys' own check (composition refuses them) is not what this test is about
    monkeypatch.setattr("xdllm.config.compose.check_component_keys", lambda config: None)
    overrides = ["model=dflash", "+frozen.target=runs/t", "model.target=runs/t", "+loss.cache_dir=cache",
                 "+collator.train.vocab_file=v.txt"]
    config = compose_config("train", overrides)
    stored = record_absolute_paths(config, overrides)
    assert (config.model.target, config.loss.cache_dir, config.collator.train.vocab_file) == (
        f"{tmp_path}/runs/t", f"{tmp_path}/cache", f"{tmp_path}/v.txt")
    assert config.model.norm == "rmsnorm"  # a component's other strings are no paths
    assert stored[1:] == [f"+frozen.target={tmp_path}/runs/t", f"model.target={tmp_path}/runs/t",
                          f"+loss.cache_dir={tmp_path}/cache", f"+collator.train.vocab_file={tmp_path}/v.txt"]
    config = compose_config("train", ["model=dflash", "+frozen.target=runs/t"])
    record_absolute_paths(config, [])
    assert OmegaConf.is_interpolation(config.model, "target")  # it follows frozen.target, made absolute
    assert config.model.target == f"{tmp_path}/runs/t"


SMALL_SORT = [*(o for o in TINY_RUN if not o.startswith("experiment=")), "trainer.max_steps=2",
              "trainer.val_check_interval=2", "model.n_heads=2"]


def test_a_drafter_given_its_target_straight_and_relative_evaluates_from_elsewhere(tmp_path, monkeypatch, capsys):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["train", *SMALL_SORT, "experiment=sort_arlm", "model.d_model=32", "model.n_layers=1",
                 "model.max_positions=64", "run_dir=target"]) == 0
    assert main(["train", *SMALL_SORT, "model=dflash", "task=sort", "dflash.block_size=4", "+frozen.target=target",
                 "model.target=target", "run_dir=drafter"]) == 0
    monkeypatch.chdir(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["eval", f"ckpt={tmp_path / 'drafter'}", "num_samples=2"]) == 0, capsys.readouterr().err


def test_builtin_tokenizer_stays_a_name_and_an_experiments_paths_are_stored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = compose_config("train", ["tokenizer=builtin"])
    assert record_absolute_paths(config, ["tokenizer=builtin"]) == ["tokenizer=builtin"]
    assert config.tokenizer == "builtin"
    config = compose_config("train", ["experiment=text_arlm"])  # its files: ${xdllm_repo:...}, absolute already
    assert record_absolute_paths(config, ["experiment=text_arlm"]) == ["experiment=text_arlm"]
    assert config.tokenizer == str(REPOSITORY / "experiments" / "data" / "stories_tokenizer.json")
    assert config.task.params.path == str(REPOSITORY / "experiments" / "data" / "stories.txt")


def _subprocess(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "XDLLM_MODEL_PATH"}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run([sys.executable, "-m", "xdllm.cli.main", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    """A folder holding prepared data ``prep`` and a family package under ``fams``; the current
    directory while the test trains."""
    (tmp_path / "docs.txt").write_text("".join(f"{' '.join(f'{i:03d}')} {'ab'[i % 2]}\n" for i in range(40)))
    prepare(PrepareOptions(inputs=[tmp_path / "docs.txt"], output=tmp_path / "prep", tokenizer="builtin",
                           val_fraction=0.2, test_fraction=0.2, workers=1))
    write_model_package(tmp_path / "fams", f"xdllm_test_anywhere_{uuid.uuid4().hex[:8]}", "toyfam")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_run_made_with_relative_paths_evaluates_and_resumes_from_elsewhere(workspace, monkeypatch, capsys):
    monkeypatch.setenv("XDLLM_MODEL_PATH", "fams")
    assert main(["train", "model=toyfam", "task=prepared", "task.params.path=prep", *SMALL, "run_dir=runs/r"]) == 0
    run = workspace / "runs" / "r"
    monkeypatch.delenv("XDLLM_MODEL_PATH")
    evaluated = _subprocess(["eval", f"ckpt={run}", "num_samples=2"], cwd=workspace / "elsewhere")
    assert evaluated.returncode == 0, evaluated.stderr
    monkeypatch.chdir(workspace / "elsewhere")
    assert main(["train", f"resume={run}", "trainer.max_steps=4"]) == 0, capsys.readouterr().err
    assert (run / "checkpoints" / "last.ckpt").is_file()


def test_a_family_that_moved_is_given_with_model_search_path(workspace, monkeypatch, capsys):
    assert main(["train", "model=toyfam", "task=prepared", "task.params.path=prep", *SMALL, "run_dir=runs/m",
                 "model_search_path=[fams]"]) == 0, capsys.readouterr().err
    shutil.move(workspace / "fams", workspace / "elsewhere" / "fams")
    run = workspace / "runs" / "m"
    refused = _subprocess(["generate", f"ckpt={run}", "num_samples=2"], cwd=workspace / "elsewhere")
    assert refused.returncode != 0
    assert "model_search_path=[<folder>]" in refused.stderr and "XDLLM_MODEL_PATH" in refused.stderr
    generated = _subprocess(["generate", f"ckpt={run}", "num_samples=2", "model_search_path=[fams]"],
                            cwd=workspace / "elsewhere")
    assert generated.returncode == 0, generated.stderr
    refused = _subprocess(["train", f"resume={run}", "trainer.max_steps=4"], cwd=workspace / "elsewhere")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (  # the recorded folder is gone
        f"xdllm: error: model_search_path entry {workspace / 'fams'} is not a directory: give the folder that holds "
        "the family's package now with model_search_path=[<folder>] (a run records the folder its family was found "
        "in, and resume= looks there)")
    resumed = _subprocess(["train", f"resume={run}", "trainer.max_steps=4", "model_search_path=[fams]"],
                          cwd=workspace / "elsewhere")
    assert resumed.returncode == 0, resumed.stderr


def test_the_last_model_search_path_decides_what_is_discovered():
    # resume=<run> composes the run's stored overrides first, then the command's: a family that
    # moved is found where the command says, as Hydra keeps the last value
    stored, given = "model_search_path=[/old/folder]", "model_search_path=[/new/folder]"
    assert search_path_override([stored, "trainer.max_steps=5", given]) == ["/new/folder"]
    assert search_path_override(["model_search_path=/one"]) == ["/one"]
    assert search_path_override(["trainer.max_steps=5"]) == []


def test_generate_records_its_file_options_absolute(workspace, capsys):
    """A stopped generation resumes from any directory: ``generate.yaml`` and ``sweep.yaml`` hold
    its prompts file and data folder as absolute paths, not as given."""
    assert absolute_generate_paths(["prompts_file=p.txt", "data_path='d (1)'", "num_samples=2", "prompts_file=null",
                                    "output_dir=out"]) == [
        f"prompts_file={workspace / 'p.txt'}", f"data_path='{workspace / 'd (1)'}'", "num_samples=2",
        "prompts_file=null", "output_dir=out"]
    assert main(["train", "task=prepared", "task.params.path=prep", *SMALL, "run_dir=runs/g"]) == 0
    (workspace / "p.txt").write_text("0 1 2\n")
    assert main(["generate", "ckpt=runs/g", "prompts_file=p.txt", "data_path=prep", "output_dir=gen"]) == 0
    record = OmegaConf.load(workspace / "gen" / "generate.yaml")
    assert (record.prompts_file, record.data_path) == (str(workspace / "p.txt"), str(workspace / "prep"))
    capsys.readouterr()
    assert main(["generate", "-m", "ckpt=runs/g", "prompts_file=p.txt", "predictor.temperature=0.0,1.0",
                 "output_dir=sweep"]) == 0
    assert f"prompts_file={workspace / 'p.txt'}" in OmegaConf.load(workspace / "sweep" / "sweep.yaml").overrides
