"""`early_stopping`: training ends before `trainer.max_steps` once `checkpoint.monitor` stops
improving (`patience`, `min_delta`) or reaches `stop_at`; the run then ends as at `max_steps`
(checkpoints, the generation after training, exit 0), its log and `xdllm runs` say so, and a
resumed run counts on from the checkpoint."""

import json

import pytest
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.run.run_list import summarize_run
from xdllm.train.checkpoint_io import read_checkpoint_file

EVERY_2 = [*TINY, "trainer.val_check_interval=2", "checkpoint.monitor=val/loss"]
NEVER_IMPROVES = "early_stopping.min_delta=100"  # no later val/loss is 100 below the first


def _step(run_dir, name="last.ckpt"):
    return int(read_checkpoint_file(run_dir / "checkpoints" / name)["global_step"])


def test_patience_ends_training_after_that_many_validations_without_improvement(tmp_path, capsys):
    run_dir = tmp_path / "run"
    overrides = [item for item in EVERY_2 if item != "generate_after_train=false"]
    assert main(["train", *overrides, "trainer.max_steps=20", "early_stopping.patience=2", NEVER_IMPROVES,
                 f"run_dir={run_dir}"]) == 0
    said = capsys.readouterr()
    expected = ("early stopping after the validation at step 6: val/loss has not improved on {} (step 2) for 2 "
                "validations (early_stopping.patience=2, min_delta=100)")
    (line,) = [line for line in said.err.splitlines() if line.startswith("early stopping")]
    assert line == expected.format(line.split(" on ")[1].split(" ")[0])
    assert _step(run_dir) == 6 and _step(run_dir, "best.ckpt") in (2, 4, 6)  # best by value: min_delta aside
    assert '"exact_match"' in said.out  # the generation after training ran, as at max_steps
    log = (run_dir / "train.log").read_text()
    assert line in log and log.splitlines()[-1].split(" ", 2)[2].startswith("result: {")
    listed = summarize_run(run_dir)
    assert (listed.step, listed.max_steps, listed.state) == (6, 20, "finished early")


def test_stop_at_ends_training_once_the_metric_reaches_it(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", *EVERY_2, "trainer.max_steps=20", "early_stopping.stop_at=1000", f"run_dir={run_dir}"]) == 0
    assert "reached early_stopping.stop_at=1000" in capsys.readouterr().err
    assert _step(run_dir) == 2


def test_a_condition_met_at_max_steps_is_no_early_stop(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", *EVERY_2, "trainer.max_steps=2", "early_stopping.stop_at=1000", f"run_dir={run_dir}"]) == 0
    assert "early stopping" not in capsys.readouterr().err and summarize_run(run_dir).state == "finished"


def test_min_steps_holds_the_stop_until_that_step(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", *EVERY_2, "trainer.max_steps=20", "early_stopping.stop_at=1000", "early_stopping.min_steps=5",
                 f"run_dir={run_dir}"]) == 0
    stops = [line for line in capsys.readouterr().err.splitlines() if line.startswith("early stopping")]
    assert len(stops) == 1 and stops[0].startswith("early stopping after the validation at step 6: val/loss=")
    assert _step(run_dir) == 6


@pytest.mark.parametrize("key", ["min_steps", "min_epochs"])
def test_lightning_s_minimum_is_refused_for_early_stopping_s(key, tmp_path, capsys):
    """In xdllm's one endless epoch Lightning's minimum kept every stop from happening (early
    stopping said so at every validation and trained on to max_steps)."""
    assert main(["train", *TINY, f"+trainer.{key}=6", f"run_dir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err == (f"xdllm: error: trainer.{key} is not used: xdllm trains one endless epoch, "
                                       "where Lightning's minimum keeps any stop from happening; set "
                                       "early_stopping.min_steps instead\n")


def test_a_resumed_run_counts_the_validations_without_improvement_on(tmp_path, capsys):
    run_dir = tmp_path / "run"
    stopping = ["early_stopping.patience=2", NEVER_IMPROVES]
    assert main(["train", *EVERY_2, "trainer.max_steps=4", *stopping, f"run_dir={run_dir}"]) == 0  # 1 without
    assert "early stopping" not in capsys.readouterr().err
    assert main(["train", f"resume={run_dir}", "trainer.max_steps=20"]) == 0
    assert "at step 6: val/loss has not improved on" in capsys.readouterr().err  # counted afresh: step 10
    assert _step(run_dir) == 6
    assert main(["train", f"resume={run_dir}"]) == 0  # as it was: it says so, and stops at its next validation
    said = capsys.readouterr().err
    assert ("this run had stopped: early stopping after the validation at step 6: val/loss has not improved on"
            in said) and "early stopping after the validation at step 8: " in said and _step(run_dir) == 8
    assert main(["train", f"resume={run_dir}", "checkpoint.monitor=val/exact_match", "trainer.max_steps=12"]) == 0
    assert _step(run_dir) == 12  # another metric is counted afresh: its best at step 10, one without at 12
    assert main(["train", f"resume={run_dir}", "early_stopping.patience=null", "trainer.max_steps=20"]) == 0
    assert _step(run_dir) == 20
    assert summarize_run(run_dir).state == "finished"


def test_a_run_that_never_validates_says_it_never_stops_early(tmp_path, capsys):
    assert main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=4", "early_stopping.stop_at=1",
                 f"run_dir={tmp_path / 'run'}"]) == 0
    assert "no best.ckpt, no early_stopping;" in capsys.readouterr().err


@pytest.mark.parametrize(("given", "refusal"), [
    ("early_stopping.patience=0", "early_stopping.patience=0 is not allowed: early_stopping.patience must be a whole "
                                  "number >= 1 (or null)"),
    ("early_stopping.patience=1.5", "early_stopping.patience=1.5 is not allowed"),
    ("early_stopping.min_delta=-1", "early_stopping.min_delta=-1 is not allowed: early_stopping.min_delta must be a "
                                    "number >= 0"),
    ("early_stopping.stop_at=abc", "early_stopping.stop_at='abc' is not allowed"),
    ("early_stopping.patiense=3", "early_stopping.patience"),
    ("early_stopping.min_steps=-1", "early_stopping.min_steps=-1 is not allowed"),
    ("early_stopping.stop_at=inf", "early_stopping.stop_at=inf is not allowed: give a finite value of val/exact_match"),
])
def test_wrong_early_stopping_values_are_refused_in_one_line(given, refusal, tmp_path, capsys):
    assert main(["train", *TINY, given, f"run_dir={tmp_path / 'run'}"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("xdllm: error: ") and refusal in error and len(error.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_a_sweep_says_which_of_its_runs_stopped_early(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert main(["train", "-m", *EVERY_2, "trainer.max_steps=6", "early_stopping.stop_at=1000,null",
                 f"run_dir={sweep}"]) == 0
    said = [line.split(" ", 2)[2] for line in (sweep / "sweep.log").read_text().splitlines() if line[:2] == "20"]
    finished = [line.rsplit("=", 1)[0] for line in said if line.startswith("sweep run") and " finished" in line]
    assert finished == ["sweep run 1 of 2 finished early, at step 2: early_stopping.stop_at=1000: best val/loss",
                        "sweep run 2 of 2 finished: early_stopping.stop_at=null: best val/loss"]
    lines = [json.loads(line) for line in (sweep / "sweep.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [2, 6] and lines[1]["early_stop"] == ""
    assert lines[0]["early_stop"].startswith("early stopping after the validation at step 2: val/loss=")
    ranking = (sweep / "sweep.log").read_text().split("best val/loss first:\n")[1]
    assert ranking.count("early_stopping.stop_at=") == 2 and "step" not in ranking  # no step shown as a score
