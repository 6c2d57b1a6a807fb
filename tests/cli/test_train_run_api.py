"""From Python: `xdllm.train_run(...)` trains one run as `xdllm train` does (the same overrides,
folder, log and printed figures); Ctrl-C stops it saved, raising `TrainingStopped`, and
`resume=` continues it; wrong arguments are refused in one sentence that says what to give."""

import json
import logging
import signal

import pytest
from tiny_run import TINY

import xdllm
from xdllm.cli.main import main
from xdllm.errors import XdllmError
from xdllm.run.run_list import summarize_run
from xdllm.run.train_call import override_words
from xdllm.train.stop_on_interrupt import StopOnInterrupt

SHORT = [*TINY, "trainer.max_steps=6", "trainer.val_check_interval=3"]


def test_train_run_trains_as_xdllm_train_does(tmp_path, capsys, monkeypatch):
    command_dir, python_dir = tmp_path / "by_command", tmp_path / "by_python"
    with_generation = [*(item for item in SHORT if item != "generate_after_train=false")]
    assert main(["train", *with_generation, f"run_dir={command_dir}"]) == 0
    printed = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    xdllm_logger = logging.getLogger("xdllm")
    monkeypatch.setattr(xdllm_logger, "handlers", [])  # as in a notebook: the command's handler not there
    monkeypatch.setattr(xdllm_logger, "propagate", True)

    result = xdllm.train_run(*with_generation, f"run_dir={python_dir}")

    said = capsys.readouterr()
    assert said.out.splitlines() == [f"run directory: {python_dir}"]
    assert "step 6/6" in said.err and "validation at step 6" in said.err  # the lines the command says
    assert xdllm_logger.handlers == [] and xdllm_logger.propagate  # the stderr handler lasted the call only
    assert result.run_dir == python_dir and result.best_checkpoint == python_dir / "checkpoints" / "best.ckpt"
    assert result.last_checkpoint == python_dir / "checkpoints" / "last.ckpt" and result.stopped_by == ""
    figures = ("exact_match", "token_accuracy", "mean_steps", "num_samples")
    assert {key: result.summary[key] for key in figures} == {key: printed[key] for key in figures}
    assert result.monitor == "val/exact_match" and result.best_score is not None
    log = (python_dir / "train.log").read_text().splitlines()
    assert log[0].split(" ", 2)[2].startswith("xdllm train experiment=sort_mlm")
    assert log[-1].split(" ", 2)[2].startswith("result: {")
    listed = summarize_run(python_dir)  # what xdllm runs says of it, from train.log
    assert (listed.step, listed.max_steps, listed.state) == (6, 6, "finished")
    assert f"run_dir='{python_dir}'" in repr(result) and "exact_match=" in repr(result)
    assert result.load().global_step == 6


@pytest.fixture
def sigint_at_default():
    """Ctrl-C as at a terminal (a run started with `&` has SIGINT ignored, left so by the stop)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_stops_train_run_saved_and_resume_continues_it(tmp_path, monkeypatch, sigint_at_default, capsys):
    run_dir = tmp_path / "run"
    at_step_end = StopOnInterrupt.on_train_batch_end

    def pressed_at_step_3(self, trainer, *arguments):
        if trainer.global_step == 3 and not self.requested:
            signal.raise_signal(signal.SIGINT)
        at_step_end(self, trainer, *arguments)

    monkeypatch.setattr(StopOnInterrupt, "on_train_batch_end", pressed_at_step_3)
    with pytest.raises(xdllm.TrainingStopped) as stopped:
        xdllm.train_run(*TINY, "trainer.max_steps=8", f"run_dir={run_dir}")
    assert isinstance(stopped.value, KeyboardInterrupt)  # a notebook's "run all" stops there too
    assert (stopped.value.step, stopped.value.cause, stopped.value.run_dir) == (3, "Ctrl-C", run_dir)
    assert stopped.value.last_checkpoint == run_dir / "checkpoints" / "last.ckpt"
    assert f"continue with: xdllm.train_run(resume='{run_dir}')" in str(stopped.value)
    assert (run_dir / "train.log").read_text().splitlines()[-1].endswith("stopped by Ctrl-C after step 3")
    monkeypatch.undo()

    resumed = xdllm.train_run(resume=run_dir)  # alone: with the overrides the run started with

    assert resumed.run_dir == run_dir and resumed.load().global_step == 8
    assert f"resuming from {run_dir / 'checkpoints' / 'last.ckpt'} (step 3)" in capsys.readouterr().err


@pytest.mark.parametrize(("arguments", "refusal"), [
    (("experiment=sort_mlm", "resume=runs/a"), r"give the run to continue as xdllm.train_run\(resume='runs/a'\)"),
    (("experiment=sort_mlm", "seed=1,2"), r"'seed=1,2' gives several values, but xdllm.train_run trains one run: "
                                          r"call it once per value \(for value in \['1', '2'\]: .*'seed=\{value\}'"),
])
def test_wrong_arguments_are_refused_before_anything_is_made(arguments, refusal, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(XdllmError, match=refusal):
        xdllm.train_run(*arguments)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("arguments", "refusal"), [
    ((["experiment=sort_mlm", "trainer.max_steps=5"],), r"takes each override as a string .* got list \[.*"
                                                        r"unpack a list with xdllm.train_run\(\*overrides\)"),
    (("experiment=sort_mlm", 5), r"got int 5$"),
])
def test_an_override_that_is_no_string_is_refused(arguments, refusal):
    """Checked where the tests' type checker (which would answer first) is not: as a notebook calls it."""
    with pytest.raises(XdllmError, match=refusal):
        override_words(arguments)


def test_a_sweep_s_or_generation_s_folder_given_to_resume_is_refused_with_how_to_continue_it(tmp_path):
    for folder, name, content in [("sweep", "sweep.yaml", "runs: []\n"), ("g", "generate.yaml", "checkpoint: x\n")]:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_text(content)
    with pytest.raises(XdllmError, match=f"resume={tmp_path / 'sweep'} is a training sweep's folder: continue it with "
                                         f"xdllm train resume={tmp_path / 'sweep'}; xdllm.train_run\\(resume=\\) "
                                         "takes one training run's folder or checkpoint \\(a sweep's run: "):
        xdllm.train_run(resume=tmp_path / "sweep")
    with pytest.raises(XdllmError, match=f"resume={tmp_path / 'g'} is a generation's folder: continue it with xdllm "
                                         f"generate resume={tmp_path / 'g'}"):
        xdllm.train_run(resume=tmp_path / "g")


def test_a_wrong_override_is_refused_as_the_command_refuses_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *TINY, "model.d_modle=16"]) == 2
    said = capsys.readouterr().err.removeprefix("xdllm: error: ").strip()
    with pytest.raises(XdllmError) as refused:
        xdllm.train_run(*TINY, "model.d_modle=16")
    assert " ".join(str(refused.value).split()) == said
    assert list(tmp_path.iterdir()) == []


def test_train_run_is_not_hidden_by_the_training_package():
    """`xdllm.train` is the package of the training loop (imported while training): the function
    has a name of its own, so that it stays reachable after a training."""
    import xdllm.train.module  # noqa: F401 (sets xdllm.train to the package)

    assert callable(xdllm.train_run) and xdllm.train_run.__module__ == "xdllm.run.train_call"
    assert {"train_run", "TrainingResult", "TrainingStopped"} <= set(dir(xdllm))


def test_a_run_early_stopping_ended_returns_why_and_its_step(tmp_path):
    stop_at_once = ["checkpoint.monitor=val/loss", "early_stopping.stop_at=1000"]
    result = xdllm.train_run(*TINY, "trainer.max_steps=20", "trainer.val_check_interval=2", *stop_at_once,
                             f"run_dir={tmp_path / 'run'}")
    assert result.step == 2 and result.stopped_by == ""
    assert result.early_stop.startswith("early stopping after the validation at step 2: val/loss=")
    assert "step=2" in repr(result) and "stopped early" in repr(result)
