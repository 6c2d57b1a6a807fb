"""``xdllm runs``: the training runs under folders, a line each: family/task, the step reached, the
best monitored value its validations logged, how its last ``xdllm train`` ended, and the overrides
that tell the runs apart."""

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from xdllm.cli.main import main
from xdllm.run.run_list import find_runs, setting_as_shown, summarize_run
from xdllm.run.run_lock import RunDirLock

STAMP = "2026-11-29 05:00:00"


def _copy_with_log(trained_run, folder, log_lines):
    """A run folder holding ``trained_run``'s config and a train.log of ``log_lines``."""
    folder.mkdir(parents=True)
    shutil.copy(trained_run / "config.yaml", folder / "config.yaml")
    (folder / "train.log").write_text("".join(f"{STAMP} {line}\n" if line else "\n" for line in log_lines))
    return folder


VALIDATIONS = ["step 3/6 lr-AdamW/pg1=0.001 train/loss=3.8 (20.0 steps/s)",
               "validation at step 3 (0.1 s): val/exact_match=0.25 val/loss=3.7 val/token_accuracy=0.5",
               "validation at step 6 (0.1 s): val/exact_match=0.25 val/loss=3.5 val/token_accuracy=0.6"]


def test_each_run_says_how_its_last_command_ended(trained_run, tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(trained_run, runs / "finished")
    command = f"xdllm train run_dir={runs}/x"
    _copy_with_log(trained_run, runs / "sweep" / "seed=1", [
        command, *VALIDATIONS, "stopped by SIGTERM after step 7"])
    _copy_with_log(trained_run, runs / "failed", [command, *VALIDATIONS, "error: RuntimeError: " + "x" * 100])
    _copy_with_log(trained_run, runs / "killed", [command, "step 3/6 train/loss=3.8 (20.0 steps/s)"])
    _copy_with_log(trained_run, runs / "resumed", [command, "stopped by Ctrl-C after step 4", "",
                                                   f"xdllm train resume={runs}/resumed", "finished"])
    training = _copy_with_log(trained_run, runs / "training", [command, "step 3/6 train/loss=3.8 (20.0 steps/s)"])
    lock = RunDirLock(training)
    try:
        assert main(["runs", str(runs)]) == 0
    finally:
        lock.release()
    table = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in table[1:]}
    assert table[0].split() == ["run", "family/task", "step", "best", "state"]
    assert sorted(rows) == [str(runs / name) for name in
                            ("failed", "finished", "killed", "resumed", "sweep/seed=1", "training")]
    state = {name.rsplit("/", 1)[-1] if "seed" not in name else "sweep": re.split(r"\s{2,}", row.strip())[1:]
             for name, row in rows.items()}
    assert state["sweep"] == ["mlm/sort", "7/6", "val/exact_match=0.25 (step 6)", "stopped by SIGTERM after step 7"]
    assert state["failed"] == ["mlm/sort", "3/6", "val/exact_match=0.25 (step 6)",
                               "failed: RuntimeError: " + "x" * 66 + "..."]
    assert state["killed"] == ["mlm/sort", "3/6", "-", "ended without a word (killed?)"]
    assert state["resumed"][1:] == ["6/6", "-", "finished"]  # the last command's ending, not the first's
    assert state["training"][1:] == ["3/6", "-", "training now"]
    assert state["finished"][:2] == ["mlm/sort", "6/6"] and state["finished"][3] == "finished"
    assert state["finished"][2].startswith("val/exact_match=")


def test_the_best_value_follows_the_monitor_s_mode(trained_run, tmp_path):
    folder = _copy_with_log(trained_run, tmp_path / "r", ["xdllm train", *VALIDATIONS, "finished"])
    assert summarize_run(folder).best == (0.25, 6)  # max: the later of a tie, as best.ckpt keeps it
    config = (folder / "config.yaml").read_text()
    (folder / "config.yaml").write_text(config.replace("monitor: val/exact_match", "monitor: val/loss")
                                        .replace("mode: max", "mode: min"))
    assert summarize_run(folder).best == (3.5, 6)
    rewound = _copy_with_log(trained_run, tmp_path / "rewound", [
        "xdllm train", *VALIDATIONS, "finished", "", "xdllm train resume=r/checkpoints/step3.ckpt",
        "warning: resume: r/checkpoints/step3.ckpt is at step 3, before the run's newest checkpoint: the steps after "
        "it are trained again, as another branch; ...",
        "validation at step 6 (0.1 s): val/exact_match=0.125 val/loss=3.6", "finished"])
    assert summarize_run(rewound).best == (0.25, 3)  # not the abandoned branch's step 6
    assert find_runs([tmp_path]) == [folder, rewound]


def test_no_runs_and_a_missing_folder(tmp_path, capsys):
    assert main(["runs", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"no training runs (a config.yaml beside a train.log) in {tmp_path}\n"
    assert main(["runs", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == (f"xdllm: error: {tmp_path / 'missing'} is not a folder: give folders that "
                                       "hold runs (default: runs)\n")


def test_the_settings_column_shows_what_tells_the_runs_apart(trained_run, tmp_path, capsys):
    runs = tmp_path / "runs"
    given = {"a": ["experiment=sort_mlm", "optim.lr=1e-3", "seed=0", "run_dir=runs/a"],
             "b": ["experiment=sort_mlm", "optim.lr=1e-3", "seed=1", "+trainer.gradient_clip=1", "seed=2"],
             "c": ["experiment=sort_mlm", "optim.lr=3e-4", "seed=0"]}
    for name, overrides in given.items():
        folder = _copy_with_log(trained_run, runs / name, ["xdllm train", *VALIDATIONS, "finished"])
        (folder / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    _copy_with_log(trained_run, runs / "old", ["xdllm train", "finished"])  # made before runs kept overrides.yaml
    assert main(["runs", str(runs)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["run", "family/task", "step", "best", "state", "settings"]
    settings = {line.split()[0].rsplit("/", 1)[1]: re.split(r"\s{2,}", line.strip())[5:] for line in table[1:]}
    # the last value of a key (a resume's), run_dir left out, what all share (experiment=) left out
    assert settings == {"a": ["optim.lr=1e-3 seed=0"], "b": ["optim.lr=1e-3 seed=2 +trainer.gradient_clip=1"],
                        "c": ["optim.lr=3e-4 seed=0"], "old": []}
    assert main(["runs", str(runs / "a")]) == 0  # one run: nothing to tell apart, no column
    assert capsys.readouterr().out.splitlines()[0].split() == ["run", "family/task", "step", "best", "state"]


def test_a_run_whose_files_cannot_be_read_is_a_row_saying_so(trained_run, tmp_path, capsys):
    runs = tmp_path / "runs"
    for name in ("config", "overrides", "list", "whole"):
        _copy_with_log(trained_run, runs / name, ["xdllm train", "finished"])
    (runs / "config" / "config.yaml").write_text("model: {\n")
    (runs / "overrides" / "overrides.yaml").write_text("- a=1\n- [\n")
    (runs / "list" / "overrides.yaml").write_text("seed: 1\n")
    (runs / "taskless").mkdir()
    (runs / "taskless" / "config.yaml").write_text("seed: 1\n")  # not one xdllm wrote
    (runs / "taskless" / "train.log").write_text("")
    assert main(["runs", str(runs)]) == 0
    rows = {line.split()[0].rsplit("/", 1)[1]: re.split(r"\s{2,}", line.strip())[1:]
            for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["config"][:3] == ["?/?", "?/?", "-"] and rows["config"][3].startswith(
        "unreadable config.yaml: ParserError: while parsing a flow node")
    assert rows["overrides"][3].startswith("unreadable overrides.yaml: ")  # the whole state, as resume= says it:
    assert summarize_run(runs / "overrides").state.startswith(
        f"unreadable overrides.yaml: {runs / 'overrides' / 'overrides.yaml'} is not readable: while parsing")
    assert summarize_run(runs / "list").state == (
        f"unreadable overrides.yaml: {runs / 'list' / 'overrides.yaml'} must hold a list of overrides (KEY=VALUE "
        "strings)")
    assert rows["taskless"][3].startswith("unreadable config.yaml: ")
    assert rows["whole"] == ["mlm/sort", "6/6", "-", "finished"]  # the others are listed still


def test_json_lines_for_scripts(trained_run, tmp_path, capsys):
    runs = tmp_path / "runs"
    folder = _copy_with_log(trained_run, runs / "a", ["xdllm train", *VALIDATIONS, "finished"])
    (folder / "overrides.yaml").write_text(yaml.safe_dump(["experiment=sort_mlm", "seed=3", "run_dir=runs/a"]))
    assert main(["runs", "--json", str(runs)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line) == {"folder": str(folder), "family": "mlm", "task": "sort", "step": 6, "max_steps": 6,
                                "state": "finished", "monitor": "val/exact_match", "mode": "max", "best": 0.25,
                                "best_step": 6, "given": ["experiment=sort_mlm", "seed=3"]}
    _copy_with_log(trained_run, runs / "b", ["xdllm train", "error: RuntimeError: " + "x" * 200])
    assert main(["runs", "--json", str(runs / "b")]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "failed: RuntimeError: " + "x" * 200  # whole, not cut
    (tmp_path / "empty").mkdir()
    assert main(["runs", "--json", str(tmp_path / "empty")]) == 0  # no runs: no lines
    assert capsys.readouterr().out == ""


def test_the_settings_column_shows_paths_under_the_current_folder_relative_to_it(trained_run, tmp_path, monkeypatch,
                                                                                 capsys):
    runs, elsewhere = tmp_path / "runs", tmp_path.parent / "elsewhere"
    given = {"a": [f"init_from={tmp_path}/runs/base", f"model_search_path=[{tmp_path}/families,{elsewhere}]",
                   f"task.params.path={tmp_path}x/data.txt"],
             "b": [f"init_from='{tmp_path}/runs/lr/optim.lr=0.1,seed=0'", "optim.lr=3e-4"]}
    for name, overrides in given.items():
        folder = _copy_with_log(trained_run, runs / name, ["xdllm train", "finished"])
        (folder / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    monkeypatch.chdir(tmp_path)
    assert main(["runs"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    settings = {line.split()[0]: re.split(r"\s{2,}", line.strip())[5] for line in rows}
    assert settings == {
        "runs/a": f"init_from=runs/base model_search_path=[families,{elsewhere}] task.params.path={tmp_path}x/data.txt",
        "runs/b": "init_from='runs/lr/optim.lr=0.1,seed=0' optim.lr=3e-4"}
    from_root = "model_search_path=[/a/b,/c]"
    assert setting_as_shown(from_root, Path("/")) == from_root  # from /, as stored
    assert main(["runs", "--json"]) == 0  # what scripts read stays as the run stored it
    assert json.loads(capsys.readouterr().out.splitlines()[0])["given"][0] == f"init_from={tmp_path}/runs/base"


def test_sort_best_lists_the_best_run_first_by_its_metric_and_mode(trained_run, tmp_path, capsys):
    runs = tmp_path / "runs"
    validation = "validation at step {step} (0.1 s): val/exact_match={match} val/loss={loss}"
    for name, (match, loss) in {"a": (0.25, 3.0), "b": (0.75, 3.5), "c": (0.5, 2.0), "d": (0.5, 1.0),
                                "e": (0.1, 2.5)}.items():
        _copy_with_log(trained_run, runs / name, ["xdllm train", validation.format(step=6, match=match, loss=loss),
                                                  "finished"])
    for name in ("d", "e"):  # these two pick best.ckpt by the lowest val/loss
        config = OmegaConf.load(runs / name / "config.yaml")
        config.checkpoint.monitor, config.checkpoint.mode = "val/loss", "min"
        OmegaConf.save(config, runs / name / "config.yaml")
    _copy_with_log(trained_run, runs / "f", ["xdllm train", "finished"])  # no validation logged
    assert main(["runs", str(runs), "--sort", "best"]) == 0
    order = [line.split()[0].rsplit("/", 1)[1] for line in capsys.readouterr().out.splitlines()[1:]]
    assert order == ["b", "c", "a", "d", "e", "f"]
    assert main(["runs", str(runs)]) == 0  # by folder, as before
    assert [line.split()[0].rsplit("/", 1)[1] for line in capsys.readouterr().out.splitlines()[1:]] == list("abcdef")
    assert main(["runs", str(runs), "--sort", "best", "--json"]) == 0
    assert [json.loads(line)["folder"][-1] for line in capsys.readouterr().out.splitlines()] == order
    with pytest.raises(SystemExit) as refused:
        main(["runs", "--sort", "worst"])
    assert refused.value.code == 2 and "argument --sort: invalid choice: 'worst'" in capsys.readouterr().err
