"""``xdllm train -m``: one run per combination of swept values, one after another, each a whole run
directory under one sweep folder; a sweep stopped part-way continues with ``resume=<sweep>``."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.run import after_training, train_sweep
from xdllm.run.sweep import swept_settings

SHORT = [*TINY, "trainer.max_steps=2", "trainer.val_check_interval=2"]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]


def _said(log: str) -> list[str]:
    """The lines of a log without their times."""
    return [line.split(" ", 2)[2] if line[:2] == "20" else line for line in log.strip().splitlines()]


def _lines(sweep: Path) -> list[dict]:
    return [json.loads(line) for line in (sweep / "sweep.jsonl").read_text().splitlines()]


def test_a_sweep_trains_each_combination_as_its_own_run_would(tmp_path, capsys):
    sweep, alone = tmp_path / "sweep", tmp_path / "alone"
    assert main(["train", "-m", *SHORT, "seed=0,1", "optim.lr=1e-3", "generate_after_train=true",
                 f"run_dir={sweep}"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["sweep"] == str(sweep) and [run["folder"] for run in printed["runs"]] == ["seed=0", "seed=1"]
    lines = _lines(sweep)
    assert lines == printed["runs"]
    assert [line["settings"] for line in lines] == [{"seed": 0}, {"seed": 1}]  # as composed: numbers
    assert all(line["monitor"] == "val/exact_match" and line["best_score"] is not None for line in lines)
    assert all(line["mode"] == "max" for line in lines)
    assert all(line["num_samples"] == 16 and "exact_match" in line for line in lines)  # the generation after training
    stored = yaml.safe_load((sweep / "seed=1" / "overrides.yaml").read_text())  # the run resumes on its own too
    assert {"optim.lr=1e-3", "seed=1"} <= set(stored) and not any(o.startswith("run_dir=") for o in stored)

    assert main(["train", *SHORT, "seed=1", "optim.lr=1e-3", f"run_dir={alone}"]) == 0
    expected, swept = _weights(alone), _weights(sweep / "seed=1")
    assert all(torch.equal(expected[name], swept[name]) for name in expected)
    assert not all(torch.equal(expected[name], value) for name, value in _weights(sweep / "seed=0").items())


def test_a_stopped_sweep_continues_where_it_stopped(tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "sweep"
    finish = after_training.finish_training
    calls = []

    def stopped_in_the_second_run_s_generation(result, config):
        calls.append(result.run_dir.name)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C after the run's last checkpoint, before its line
        return finish(result, config)

    monkeypatch.setattr(after_training, "finish_training", stopped_in_the_second_run_s_generation)
    assert main(["train", "-m", *SHORT, "seed=0,1,2", f"run_dir={sweep}"]) == 130  # as Ctrl-C exits
    assert [line["folder"] for line in _lines(sweep)] == ["seed=0"]
    assert f"continue it with: xdllm train resume={sweep}" in capsys.readouterr().err
    trained = _weights(sweep / "seed=1")

    assert main(["train", f"resume={sweep}"]) == 0
    assert calls == ["seed=0", "seed=1", "seed=1", "seed=2"]  # seed=0 kept, seed=1 continued, seed=2 trained
    assert [line["folder"] for line in _lines(sweep)] == ["seed=0", "seed=1", "seed=2"]
    assert all(torch.equal(value, trained[name]) for name, value in _weights(sweep / "seed=1").items())
    stopped_run_log = (sweep / "seed=1" / "train.log").read_text()  # each run's log: both of its commands
    assert stopped_run_log.count("sweep run 2 of 3: seed=1") == 2 and "stopped by Ctrl-C" in stopped_run_log
    assert "resuming from" in stopped_run_log.split("\n\n")[1] and stopped_run_log.endswith(" finished\n")
    # the sweep's own log: both commands, each run started and finished, the stop, the ranking
    first, second = [_said(block) for block in (sweep / "sweep.log").read_text().split("\n\n")]
    assert first[0].startswith("xdllm train -m experiment=sort_mlm") and first[0].endswith(f"run_dir={sweep}")
    assert first[1:5] == [f"a sweep of 3 runs in {sweep}", "sweep run 1 of 3: seed=0",
                          "sweep run 1 of 3 finished: seed=0: best val/exact_match=0", "sweep run 2 of 3: seed=1"]
    assert first[5].startswith("warning: the sweep stopped with 1 of 3 runs finished; continue it with: xdllm train "
                               "resume=") and first[6:] == ["stopped by Ctrl-C"]
    assert second[:3] == [f"xdllm train resume={sweep}", f"continuing the sweep in {sweep}: 1 of 3 runs finished",
                          "sweep run 2 of 3: seed=1"]
    assert "the sweep's runs, best val/exact_match first:" in second and second[-1] == "finished"
    assert main(["train", f"resume={sweep}"]) == 2
    assert "has finished all 3 runs: there is nothing to continue" in capsys.readouterr().err
    assert (sweep / "sweep.log").read_text().count("\n\n") == 1  # a refused command writes nothing


def test_a_run_stopped_before_its_first_checkpoint_trains_anew(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    finish = after_training.finish_training

    def stopped_once(result, config):
        monkeypatch.setattr(after_training, "finish_training", finish)
        raise KeyboardInterrupt

    monkeypatch.setattr(after_training, "finish_training", stopped_once)
    assert main(["train", "-m", *SHORT, "seed=0,1", f"run_dir={sweep}"]) == 130
    for checkpoint in (sweep / "seed=0" / "checkpoints").glob("*.ckpt"):
        checkpoint.unlink()  # as if stopped before its first step was saved
    assert main(["train", f"resume={sweep}"]) == 0
    assert [line["folder"] for line in _lines(sweep)] == ["seed=0", "seed=1"]
    assert (sweep / "seed=0" / "checkpoints" / "last.ckpt").is_file()
    assert [path.name.split(".moved-")[0] for path in sweep.glob("seed=0.moved-*")] == ["seed=0"]


def test_a_sweep_over_long_values_trains_each_run_in_a_folder_of_a_name_that_fits(tmp_path, capsys):
    """The runs' folders were named by the whole values: 'File name too long' once the first began."""
    sweep = tmp_path / "sweep"
    names = ["a" * 200, "a" * 199 + "b"]
    assert main(["train", "-m", *SHORT, f"name={','.join(names)}", f"run_dir={sweep}"]) == 0
    lines = _lines(sweep)
    assert [line["settings"] for line in lines] == [{"name": name} for name in names]
    assert len({line["folder"] for line in lines}) == 2
    assert all(len(line["folder"].encode()) == 180 and (sweep / line["folder"] / "checkpoints").is_dir()
               for line in lines)


def test_the_ranking_puts_the_best_first_for_the_metric_s_mode():
    lines = [{"folder": "a", "monitor": "val/loss", "mode": "min", "best_score": 0.5},
             {"folder": "b", "monitor": "val/loss", "mode": "min", "best_score": 0.25},
             {"folder": "c", "monitor": "val/loss", "mode": "min", "best_score": None}]
    assert train_sweep.ranking(lines).splitlines() == ["the sweep's runs, best val/loss first:", "  0.25  b",
                                                       "  0.5  a", "  none  c"]
    maximised = [{**line, "mode": "max", "monitor": "val/exact_match"} for line in lines[:2]]
    assert train_sweep.ranking(maximised).splitlines()[1:] == ["  0.5  a", "  0.25  b"]
    # runs of another metric are ranked apart (they were sorted into the first metric's order)
    assert train_sweep.ranking([{**maximised[1], "folder": "d"}, *lines]).splitlines() == [
        "the sweep's runs, best val/exact_match first:", "  0.25  d",
        "the sweep's runs, best val/loss first:", "  0.25  b", "  0.5  a", "  none  c"]


def test_the_ranking_shows_each_run_s_scores_after_training_beside_its_best():
    """A sweep whose runs never validated ranked them 'none' a line each, with nothing to compare."""
    lines = [{"folder": "a", "monitor": "val/loss", "mode": "min", "best_score": 0.5, "num_samples": 512,
              "mean_steps": 9.0, "tokens_per_second": 4026.5, "exact_match": 0.25, "token_accuracy": 0.87654},
             {"folder": "b", "monitor": "val/loss", "mode": "min", "best_score": None, "exact_match": 0.0,
              "ema": True}, {"folder": "c", "monitor": "val/loss", "mode": "min", "best_score": None}]
    assert train_sweep.ranking(lines).splitlines() == [
        "the sweep's runs, best val/loss first:", "  0.5  a  (after training: exact_match=0.25, token_accuracy=0.8765)",
        "  none  b  (after training: exact_match=0)", "  none  c"]


@pytest.mark.parametrize("swept", [["seed=0,0"], ["optim.lr=1e-3,0.001", "seed=0,1"]])
def test_a_combination_given_twice_is_refused_before_any_run_trains(tmp_path, capsys, swept):
    """The second run used to be refused at the first's folder once the first had trained, and the
    sweep said to continue it, which stopped there again."""
    sweep = tmp_path / "sweep"
    assert main(["train", "-m", *SHORT, *swept, f"run_dir={sweep}"]) == 2
    repeated = "seed=0" if swept == ["seed=0,0"] else "optim.lr=0.001,seed=0"
    assert (f"xdllm: error: -m: two combinations are {repeated} (a value given twice, or one written two ways): "
            "each is one run, in a folder of that name; give each value once") in capsys.readouterr().err
    assert not sweep.exists()


def test_a_swept_option_of_no_value_is_refused(tmp_path, capsys):
    assert main(["train", "-m", *SHORT, "seed=range(0,0)", f"run_dir={tmp_path / 'sweep'}"]) == 2
    assert capsys.readouterr().err == ("xdllm: error: -m: seed=range(0,0) gives no value, so the sweep would run "
                                       "nothing: give at least one\n")  # not an IndexError's traceback


def test_a_config_group_is_swept_by_its_option_names(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert main(["train", "-m", *SHORT, "model=mlm,mdlm", f"run_dir={sweep}"]) == 0
    assert [line["settings"] for line in _lines(sweep)] == [{"model": "mlm"}, {"model": "mdlm"}]
    assert yaml.safe_load((sweep / "model=mdlm" / "config.yaml").read_text())["model_family"] == "mdlm"


def test_swept_settings_name_an_experiment_by_its_option_and_keep_a_null_value():
    """``-m experiment=sort_mlm,sort_mdlm`` recorded ``{"experiment": null}`` for every run: the
    composed config has no ``experiment`` key (the group writes to the root)."""
    config = OmegaConf.create({"seed": 0, "model": {"d_model": 32}, "mdlm": {"target_length": None}})
    combination = {"experiment": "sort_mdlm", "model": "mdlm", "seed": "0", "mdlm.target_length": "null"}
    assert swept_settings(combination, config) == {"experiment": "sort_mdlm", "model": "mdlm", "seed": 0,
                                                   "mdlm.target_length": None}


def test_a_sweep_stopped_by_a_signal_exits_as_its_run_did_and_says_how_to_continue(tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "sweep"
    trained = train_sweep.train

    def sigterm_in_the_first_run(*args, **kwargs):  # as StopOnInterrupt reports a SIGTERM after a step
        return dataclasses.replace(trained(*args, **kwargs), stopped_at_step=2, stopped_by="SIGTERM")

    monkeypatch.setattr(train_sweep, "train", sigterm_in_the_first_run)
    assert main(["train", "-m", *SHORT, "seed=0,1", f"run_dir={sweep}"]) == 143
    err = capsys.readouterr().err
    assert f"stopped by SIGTERM after step 2 of {sweep / 'seed=0'}; continue the sweep with: xdllm train " \
           f"resume={sweep}" in err
    assert err.count("continue") == 1 and not (sweep / "sweep.jsonl").exists() and not (sweep / "seed=1").exists()
    assert _said((sweep / "sweep.log").read_text())[-1] == (
        f"stopped by SIGTERM after step 2 of {sweep / 'seed=0'}, with 0 of 2 runs finished; continue the sweep with: "
        f"xdllm train resume={sweep}")
