"""`xdllm train --help` lists every option with its default; `--cfg` prints the composed config
and runs nothing."""

import inspect
import platform
from importlib import metadata
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import xdllm
from xdllm.cli.config_help import config_section
from xdllm.cli.help_text import PREDICTOR_HELP
from xdllm.cli.main import main
from xdllm.config.compose import ROOT_CONFIG_DIR
from xdllm_models.mlm.predictor import MLMPredictor


def _help(capsys, command: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_train_help_lists_every_top_level_key_with_its_default(capsys):
    text = _help(capsys, "train")
    for option in ("resume=null", "run_dir=null", "seed=0", "generate_after_train=true",
                   "existing_run_dir=refuse", "progress=auto", "trainer.accelerator=cpu",
                   "trainer.max_steps=2000", "optim.lr=0.001", "checkpoint.monitor=null",
                   "data.validation_roles=null", "text_samples_after_train=8"):
        assert f"  {option}" in text, option
    root = OmegaConf.load(ROOT_CONFIG_DIR / "train.yaml")
    assert "defaults" in root
    for key in root:
        if key != "defaults":
            assert f"  {key}" in text, key  # every key of train.yaml, nested ones as key.sub
    assert "Where checkpoints, TensorBoard events" in text  # the comment above run_dir
    assert "experiment" in text and "sort_mlm" in text  # the config groups stay listed


def test_generate_help_lists_its_options(capsys):
    text = _help(capsys, "generate")
    for option in ("ckpt=???", "split=test", "prompts_file=null", "history=null", "predictor={}"):
        assert f"  {option}" in text, option
    assert "A checkpoint file or a run directory" in text
    assert "predictor.KEY=VALUE" in text


def test_comments_above_and_beside_keys_describe_them():
    section = config_section(ROOT_CONFIG_DIR / "train.yaml")
    comments = {key.key: key.comment for key in section.keys}
    assert comments["checkpoint.save_every_n_steps"].startswith("Also keep checkpoints/step<N>.ckpt")
    assert comments["data.num_workers"] == "DataLoader worker processes"  # an inline comment
    assert "Root config" not in " ".join(comments.values())  # the file's opening comment is its own
    trainer = config_section(ROOT_CONFIG_DIR / "trainer" / "default.yaml", "trainer.")
    assert trainer.description.startswith("Lightning Trainer arguments")
    assert trainer.keys[0].key == "trainer.max_steps" and trainer.keys[0].comment == ""


def test_train_cfg_prints_the_composed_config_and_runs_nothing(capsys, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["train", "--cfg", "experiment=sort_mlm", "model.d_model=48", f"run_dir={run_dir}",
                 "resume=somewhere"]) == 0
    config = OmegaConf.create(capsys.readouterr().out)
    assert config.model.d_model == 48 and config.name == "sort_mlm"
    assert config.run_dir == str(run_dir)
    assert config.checkpoint.last_every_n_steps == config.trainer.val_check_interval  # resolved
    assert OmegaConf.to_container(config)["model"]["vocab_size"] == "${derived.vocab_size}"  # set at build
    assert not run_dir.exists()


def test_generate_cfg_shows_predictor_overrides(capsys):
    assert main(["generate", "--cfg", "ckpt=runs/x", "predictor.threshold=0.7"]) == 0
    config = OmegaConf.create(capsys.readouterr().out)
    assert config.ckpt == "runs/x" and config.predictor.threshold == 0.7


def test_cfg_still_checks_the_overrides(capsys):
    assert main(["train", "--cfg", "experiment=no_such"]) == 2
    assert "unknown experiment 'no_such'" in capsys.readouterr().err


def test_cfg_works_anywhere_among_the_overrides(capsys):
    assert main(["train", "experiment=sort_mdlm", "--cfg", "trainer.max_steps=5"]) == 0
    assert "  max_steps: 5\n" in capsys.readouterr().out


def test_generate_help_names_every_option_of_the_mlm_predictor():
    options = [name for name in inspect.signature(MLMPredictor).parameters if name not in ("tokenizer", "model")]
    assert [name for name in options if name not in PREDICTOR_HELP] == []


def test_version_names_xdllm_where_it_runs_from_and_the_libraries(capsys):
    """``xdllm --version``, for a bug report (it was ``error: the following arguments are required``)."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    package = Path(xdllm.__file__).resolve().parent
    cuda = (f"CUDA {torch.version.cuda}: {torch.cuda.device_count()} device(s)" if torch.cuda.is_available()
            else "no CUDA device")
    assert capsys.readouterr().out == (
        f"xdllm {metadata.version('xdllm')} at {package}; python {platform.python_version()}, torch "
        f"{torch.__version__} ({cuda}), lightning {metadata.version('lightning')}\n")
