"""``init_from=``: a new run starts from another run's weights (its moving average where it kept
one), with a fresh optimizer and step, in the same family or another whose network they fit."""

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from tiny_run import TINY, TINY_MLM, TINY_RUN, TINY_TEXT

from xdllm.cli.main import main
from xdllm.run.run_checkpoint import read_run_checkpoint

STORIES = Path(__file__).parents[2] / "experiments" / "data"
STILL = ["optim.lr=1e-30", "optim.warmup_steps=0", "optim.weight_decay=0.0"]
"""An optimizer step that leaves float32 weights as they are: the weights a run started from."""


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return read_run_checkpoint(checkpoint).model_weights(ema=False)


def _train(*arguments: str) -> None:
    assert main(["train", *arguments]) == 0


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A tiny MLM run of 3 steps that kept a moving average of its weights."""
    run_dir = tmp_path_factory.mktemp("init") / "source"
    _train(*TINY, "trainer.max_steps=3", "trainer.val_check_interval=3", "optim.ema_decay=0.5",
           f"run_dir={run_dir}")
    return run_dir


def test_a_run_starts_from_the_weights_another_run_validated_with(source: Path, tmp_path: Path, caplog):
    started = tmp_path / "started"
    _train(*TINY, *STILL, "trainer.max_steps=1", "trainer.val_check_interval=1", f"init_from={source}",
           f"run_dir={started}")

    given = read_run_checkpoint(source)
    assert given.averaged
    averaged, trained = given.model_weights(ema=True), given.model_weights(ema=False)
    assert any(not torch.equal(averaged[name], trained[name]) for name in averaged)
    after = _weights(started / "checkpoints" / "last.ckpt")
    assert all(torch.equal(after[name], averaged[name]) for name in averaged)  # the average, not the raw weights

    checkpoint = torch.load(started / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["global_step"] == 1  # its own step, from 0
    assert checkpoint["xdllm_init_from"] == {"checkpoint": str(given.path.resolve()), "global_step": 3,
                                             "model_family": "mlm", "moving_average": True}
    recorded = yaml.safe_load((started / "config.yaml").read_text())["init_from"]
    assert recorded == str(source.resolve())
    assert f"starting from the weights of {given.path} (mlm family, step 3, its moving average)" in caplog.text


def test_mlm_weights_start_an_mdlm_model_whose_names_lack_the_wrapper(source: Path, tmp_path: Path, caplog):
    started = tmp_path / "mdlm"
    _train(*TINY_RUN, "model=mdlm", *TINY_MLM, *STILL, "trainer.max_steps=1", "trainer.val_check_interval=1",
           f"init_from={source}", f"run_dir={started}")
    averaged = read_run_checkpoint(source).model_weights()
    after = _weights(started / "checkpoints" / "last.ckpt")
    assert set(after) == {name.removeprefix("transformer.") for name in averaged}
    assert all(torch.equal(after[name.removeprefix("transformer.")], value) for name, value in averaged.items())
    assert "into this run's mdlm model (names: transformer.* there is * here)" in caplog.text


def test_weights_that_do_not_fit_name_the_options_to_give(source: Path, tmp_path: Path, capsys):
    code = main(["train", *TINY, "model.d_model=48", "model.n_layers=2", "trainer.max_steps=1",
                 f"init_from={source}", f"run_dir={tmp_path / 'wide'}"])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1
    assert "its weights do not fit the model this config builds: transformer.blocks.0.attention.out.weight is " \
           "[32, 32] there and [48, 48] here (and " in error
    assert "model.d_model=32 there, 48 here; model.n_layers=1 there, 2 here; give them as that run had them: " \
           "model.d_model=32 model.n_layers=1" in error
    assert not (tmp_path / "wide").exists()


def test_a_tokenizer_other_than_the_weights_is_refused(source: Path, tmp_path: Path, capsys):
    code = main(["train", *TINY, "trainer.max_steps=1", f"tokenizer={STORIES / 'stories_tokenizer.json'}",
                 f"init_from={source}", f"run_dir={tmp_path / 'other'}"])
    error = capsys.readouterr().err
    assert code == 2
    assert f"init_from={source.resolve()}/checkpoints/best.ckpt trained with the built-in tokenizer" in error
    assert "leave tokenizer= out to train with it" in error


def test_a_text_run_takes_the_tokenizer_its_weights_trained_with(tmp_path: Path, capsys):
    corpus, tokenizer = tmp_path / "corpus.txt", tmp_path / "tokenizer.json"
    corpus.write_text((STORIES / "stories.txt").read_text())
    shutil.copy(STORIES / "stories_tokenizer.json", tokenizer)
    text = ["task=text_file", f"task.params.path={corpus}", "model=mdlm", *TINY_TEXT, "generate_after_train=false"]
    _train(*text, f"tokenizer={tokenizer}", f"run_dir={tmp_path / 'pretrained'}")
    tokenizer.unlink()  # the checkpoint stores it

    _train(*text, "trainer.max_steps=2", f"init_from={tmp_path / 'pretrained'}", f"run_dir={tmp_path / 'tuned'}")
    assert f"tokenizer: the one it trained with, {tokenizer} (its checkpoint stores it)" in capsys.readouterr().err
    config = yaml.safe_load((tmp_path / "tuned" / "config.yaml").read_text())
    assert config["tokenizer"] == str(tokenizer)
    assert f"tokenizer={tokenizer}" in yaml.safe_load((tmp_path / "tuned" / "overrides.yaml").read_text())
    stored = torch.load(tmp_path / "tuned" / "checkpoints" / "last.ckpt", weights_only=False)["xdllm_tokenizer"]
    assert stored == (STORIES / "stories_tokenizer.json").read_text()

    code = main(["train", *text, f"tokenizer={STORIES / 'stories_tokenizer.json'}", "task.params.max_tokens=12",
                 f"init_from={tmp_path / 'pretrained'}", f"run_dir={tmp_path / 'same'}"])
    assert code == 0, capsys.readouterr().err  # the same tokenizer given again (another file, same content)

    # a task the weights' tokenizer cannot encode: the error says init_from chose that tokenizer
    assert main(["train", *TINY, f"init_from={tmp_path / 'pretrained'}", f"run_dir={tmp_path / 'sort'}"]) == 2
    error = capsys.readouterr().err
    assert "xdllm: error: task sort: " in error
    assert f"(the tokenizer is {tokenizer}, the one init_from={tmp_path / 'pretrained'}" in error


def test_a_resumed_run_keeps_its_start_and_refuses_another(source: Path, tmp_path: Path, capsys):
    copied, started = tmp_path / "copied", tmp_path / "started"
    shutil.copytree(source, copied)
    _train(*TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", f"init_from={copied}",
           f"run_dir={started}")
    shutil.rmtree(copied)  # a resumed run continues from its own checkpoint, not from init_from
    _train(f"resume={started}", "trainer.max_steps=3")
    assert torch.load(started / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 3

    code = main(["train", f"resume={started}", "trainer.max_steps=4", f"init_from={source}"])
    error = capsys.readouterr().err
    assert code == 2 and f"init_from={source.resolve()} but this run started from {copied}" in error
    assert "start a new run (without resume=)" in error
