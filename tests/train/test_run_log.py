"""Each ``xdllm train`` of a run appends what xdllm said to the run's ``train.log``: its command,
the timed lines (the metric lines even under a progress bar), and the result or the error it
ended with; a command refused before it claims the run's folder writes nothing."""

import logging
import re

import pytest
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.cli.stderr_handler import StderrHandler
from xdllm.log_marks import FILE_ONLY
from xdllm.run.run_log import (
    GENERATE_LOG,
    RunLog,
    drop_generation_log,
    keeping_run_log,
    start_generation_log,
)


@pytest.mark.slow
def test_the_run_log_keeps_every_command_of_the_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", "generate_after_train=true",
                 f"run_dir={run}"]) == 0
    assert main(["train", f"resume={run}", "trainer.max_steps=4", "optim.lr=0.002", "generate_after_train=false"]) == 0
    written = (run / "train.log").read_text()
    assert main(["train", f"resume={run}", "trainer.max_steps=3"]) == 2  # refused: past the run's step 4
    assert (run / "train.log").read_text() == written
    capsys.readouterr()

    first, second = written.split("\n\n")
    assert first.startswith("20") and first.split("\n")[0].endswith(f"xdllm train {' '.join(TINY)} trainer.max_steps=2 "
                                                                     f"trainer.val_check_interval=2 "
                                                                     f"generate_after_train=true run_dir={run}")
    assert "step 2/2 " in first and "validation at step 2 (" in first and "trained 2 steps in" in first
    assert first.rstrip().split("\n")[-1].split(" ", 2)[2].startswith('result: {"checkpoint": ')
    assert second.split("\n")[0].endswith(f"xdllm train resume={run} trainer.max_steps=4 optim.lr=0.002 "
                                           "generate_after_train=false")
    assert second.rstrip().endswith(" finished")  # no generation after training: no figures printed
    assert "resume: optim.lr 0.001 -> 0.002" in second and "step 4/4 " in second
    assert f"resuming from {run}/checkpoints/last.ckpt (step 2)" in second
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", line) for line in written.split("\n") if line)
    assert list(run.glob(f"generate/*/{GENERATE_LOG}")) == []  # the generation after training logs here


@pytest.mark.slow
def test_the_run_log_keeps_the_metric_lines_a_progress_bar_shows_and_the_error_the_run_ended_with(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", "progress=bar",
                 "trainer.enable_progress_bar=true", "checkpoint.monitor=val/nothing", f"run_dir={run}"]) == 2
    error = capsys.readouterr().err
    assert "step 2/2" not in error  # the bar shows the metrics on the terminal
    lines = (run / "train.log").read_text().rstrip().split("\n")
    assert any("step 2/2 " in line for line in lines) and any("validation at step 2 (" in line for line in lines)
    assert "error: checkpoint.monitor=val/nothing is not a metric this run logs at validation" in lines[-1]


def test_a_run_log_holds_the_lines_before_the_run_s_folder_is_known_and_writes_none_after_a_failed_write(
        tmp_path, capsys):
    logger = logging.getLogger("xdllm.test_run_log")
    with keeping_run_log(["xdllm", "train", "seed=1"]) as run_log:
        logger.warning("before the folder")
        run_log.start(tmp_path)
        logger.info("after it")
    logger.info("after the command")
    lines = (tmp_path / "train.log").read_text().split("\n")
    assert [line[20:] for line in lines] == ["xdllm train seed=1", "warning: before the folder", "after it", ""]

    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "train.log").mkdir()  # no file can be written there
    run_log = RunLog(["xdllm", "train"])
    run_log.start(tmp_path / "broken")
    run_log.note("again")
    assert capsys.readouterr().err.count("could not write the log") == 1
    assert run_log.failed


def test_a_generation_log_starts_in_the_first_folder_claimed_and_goes_with_a_folder_removed(tmp_path):
    """``xdllm generate``'s log: in a sweep's folder, not its generations'; a folder removed takes it away."""
    logger = logging.getLogger("xdllm.test_run_log")
    sweep, generation = tmp_path / "sweep", tmp_path / "sweep" / "a"
    generation.mkdir(parents=True)
    with keeping_run_log(["xdllm", "train", "seed=1"]) as run_log:  # a training's log is started by train alone
        start_generation_log(tmp_path)
        assert run_log.path is None
    with keeping_run_log(["xdllm", "generate", "-m", "ckpt=r"], GENERATE_LOG):
        logger.info("held")
        start_generation_log(sweep)
        start_generation_log(generation)
        drop_generation_log(generation)  # a generation of the sweep that left nothing: the sweep's log goes on
        logger.info("after")
    assert [line[20:] for line in (sweep / GENERATE_LOG).read_text().splitlines()] == [
        "xdllm generate -m ckpt=r", "held", "after"]
    assert not (generation / GENERATE_LOG).exists() and not (tmp_path / "train.log").exists()
    with pytest.raises(RuntimeError), keeping_run_log(["xdllm", "generate", "ckpt=r"], GENERATE_LOG):
        start_generation_log(generation)
        logger.info("generating")
        drop_generation_log(generation)
        raise RuntimeError("failed having finished nothing")
    assert not (generation / GENERATE_LOG).exists()  # nor written again by the error it ended with
    with pytest.raises(RuntimeError), keeping_run_log(["xdllm", "generate", "ckpt=r"], GENERATE_LOG):
        start_generation_log(sweep)  # a log of earlier commands keeps their lines alone
        logger.info("generating")
        drop_generation_log(sweep)
        raise RuntimeError("failed having finished nothing")
    assert [line[20:] for line in (sweep / GENERATE_LOG).read_text().splitlines()] == [
        "xdllm generate -m ckpt=r", "held", "after"]


def test_the_terminal_leaves_the_lines_meant_for_the_run_log_only():
    record = logging.LogRecord("xdllm", logging.INFO, __file__, 1, "step 2/2", None, None)
    assert StderrHandler().filter(record)
    setattr(record, FILE_ONLY, True)
    assert not StderrHandler().filter(record)
