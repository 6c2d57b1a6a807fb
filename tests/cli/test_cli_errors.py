"""Every user mistake gives one `xdllm: error: ...` line and exit status 2, no traceback."""

import subprocess
import sys

import pytest

from xdllm.cli.main import main
from xdllm.registry import discover_families


def _error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    assert lines[0].startswith("xdllm: error: ")
    return lines[0]


@pytest.mark.parametrize("overrides, expected", [
    (["experiment=no_such_experiment"], "unknown experiment 'no_such_experiment'; available: "),
    (["model=no_such_model"], "unknown model 'no_such_model'; available: "),
    (["task=no_such_task"], "unknown task 'no_such_task'"),
    (["collator=no_such_collator"], "unknown collator 'no_such_collator'; available: "),
    (["trainer_strategy=fsdp"], "unknown trainer_strategy 'fsdp'; available: ddp, single"),
    (["trainer.max_stepz=3"], "unknown key 'trainer.max_stepz' (did you mean trainer.max_steps?): trainer does not "
     "list it; known keys there: "),
    (["trainer.max_steps=three"], "trainer.max_steps='three' is not allowed: trainer.max_steps must be a whole number"),
    (["not-an-override"], "override 'not-an-override' is not KEY=VALUE (nor ~KEY, which deletes a key)"),
])
def test_train_errors_are_one_line(capsys, overrides, expected):
    assert main(["train", *overrides]) == 2
    assert expected in _error_line(capsys)


@pytest.mark.parametrize("overrides, expected", [
    (["task=null"], "task=null: a config group takes one of its options, not null: addition, prepared, "),
    (["collator=null"], "collator=null: a config group takes one of its options, not null: packed_arlm, "
                        "packed_bd3lm, packed_mlm; ~collator removes it"),
    (["~model"], "~model: a run needs a model: choose one of arlm, "),
    (["loss=3"], "loss=3 is not allowed: loss is a group of options, not a value: set them one by one "
                 "(loss.NAME=VALUE; xdllm train --cfg shows them)"),
    (["predictor=null"], "predictor=None is not allowed: predictor is a group of options, not a value"),
    (["collator.val=null"], "collator.val=None is not allowed: collator.val is a group of options"),
    (["mlm=3"], "mlm=3 is not allowed: mlm is a group of options"),
    (["history=null"], "history=None is not allowed: history is a group of options, not a value: set them one by "
                       "one (history.num_samples=..., history.k=...); history.num_samples=0 records no validation"),
    (["data=3"], "data=3 is not allowed: data is a group of options, not a value: set them one by one "
                 "(data.batch_size=..., "),
])
def test_a_group_given_one_value_is_one_line(capsys, overrides, expected):
    """These were tracebacks (``loss=3``, ``task=null``), a run that failed at its first
    validation (``predictor=null``), or an error about a key never given
    (``history=null``: ``history.num_samples=None is not allowed``)."""
    assert main(["train", "--cfg", "experiment=varlen_sort_packed", *overrides]) == 2
    line = _error_line(capsys)
    assert line.startswith(f"xdllm: error: {expected}"), line


@pytest.mark.parametrize("command", ["generate", "eval"])
@pytest.mark.parametrize("override", ["predictor=3", "predictor=null", "evaluator=3", "evaluator=null"])
def test_a_generation_component_given_one_value_is_one_line(capsys, tmp_path, command, override):
    """They were tracebacks (``Input cfg is not an OmegaConf config object``), before any
    checkpoint was read."""
    assert main([command, f"ckpt={tmp_path}", override]) == 2
    node, _, value = override.partition("=")
    assert _error_line(capsys) == (
        f"xdllm: error: {node}={None if value == 'null' else int(value)!r} is not allowed: {node} is a group of "
        f"options, not a value: set them one by one ({node}.NAME=VALUE; xdllm generate --cfg ckpt=<run> shows them)")


def test_an_optional_group_is_removed_with_a_tilde(capsys):
    """``~collator`` after an experiment's packed collator gives the family's own (it was refused
    as ``unknown collator ''``)."""
    assert main(["train", "--cfg", "experiment=varlen_sort_packed", "~collator"]) == 0
    assert "_target_: xdllm_models.mlm.collator.MLMSeq2SeqTrainCollator" in capsys.readouterr().out


def test_missing_checkpoint_is_one_line(capsys, tmp_path):
    assert main(["generate", f"ckpt={tmp_path / 'missing.ckpt'}"]) == 2
    assert "checkpoint not found" in _error_line(capsys)


def test_run_directory_without_checkpoint_is_one_line(capsys, tmp_path):
    assert main(["eval", f"ckpt={tmp_path}"]) == 2
    assert "no checkpoint in run directory" in _error_line(capsys)


def test_generate_without_ckpt_is_one_line(capsys):
    assert main(["generate"]) == 2
    assert "ckpt" in _error_line(capsys)


def test_help_lists_groups_and_experiments():
    result = subprocess.run([sys.executable, "-m", "xdllm.cli.main", "--help"],
                            capture_output=True, text=True, check=True)
    for expected in ("experiment", "sort_mlm", "trainer_strategy", "ddp", "model", "mlm", "task",
                     "resume=runs/quick/checkpoints/best.ckpt"):
        assert expected in result.stdout


def test_models_lists_the_built_in_families(capsys):
    assert main(["models"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]
    assert names == sorted(discover_families())
    assert {"mlm", "mdlm"} <= set(names)


def test_a_failed_generation_after_training_says_where_the_finished_checkpoints_are(capsys, tmp_path, monkeypatch):
    from tiny_run import TINY

    import xdllm.run.after_training
    from xdllm.errors import XdllmError

    def fail(*args, **kwargs):
        raise XdllmError("the canvas does not fit")

    monkeypatch.setattr(xdllm.run.after_training, "generate_after_training", fail)
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "generate_after_train=true", "trainer.max_steps=2", "trainer.val_check_interval=2",
                 f"run_dir={run_dir}"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("xdllm: error: training finished") and "the canvas does not fit" in error
    assert str(run_dir / "checkpoints") in error and f"ckpt={run_dir}" in error
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
