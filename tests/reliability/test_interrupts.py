"""Ctrl-C during `xdllm train`: the first press ends training after the step under way with that
step saved, and the run resumes from it; a second press stops at once. SIGTERM (a scheduler,
timeout, docker stop) ends it the same way, with status 143. DataLoader workers
receive the signal too (as from a terminal) and must not break the clean stop. The handler is
driven directly for the second press: two real presses in a row race the tiny run's steps.
A DataLoader worker killed (as by the out-of-memory killer) is one line that says what to do."""

import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.run.dead_worker import dead_worker_error
from xdllm.run.run_overrides import continue_command
from xdllm.run.train import TrainingInterrupted
from xdllm.train.checkpoint_io import read_checkpoint_file
from xdllm.train.stop_on_interrupt import StopOnInterrupt, StoppedByInterrupt

TRAIN = [sys.executable, "-m", "xdllm.cli.main", "train", *TINY, "trainer.max_steps=100000",
         "trainer.val_check_interval=100000", "checkpoint.last_every_n_steps=5", "data.num_workers=2"]


def _interrupt(command: list[str], presses: int, ready: Path, signum: int = signal.SIGINT,
               group: bool = True) -> subprocess.CompletedProcess:
    """Run ``command`` in its own process group; once ``ready`` exists, send ``signum`` to the whole
    group (the main process and its DataLoader workers, as a terminal does), or to the main
    process only, ``presses`` times."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("XDLLM_RUN_DIR", None)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True,  # SIGINT at its default even under a background CI
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    for _ in range(presses):
        (os.killpg if group else os.kill)(process.pid, signum)
        time.sleep(0.5)  # two signals before the handler runs would arrive as one
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.slow
def test_ctrl_c_saves_the_step_under_way_and_the_run_resumes_from_it(tmp_path):
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "last.ckpt"
    stopped = _interrupt([*TRAIN, f"run_dir={run_dir}"], 1, last)
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    assert "Traceback" not in stopped.stderr and "Ctrl-C: stopping after this optimizer step" in stopped.stderr
    step = int(read_checkpoint_file(last)["global_step"])
    assert f"stopped by Ctrl-C after step {step}, saved in {last}" in stopped.stderr
    assert step >= 5  # last.ckpt was first written at step 5
    assert not list(run_dir.glob("generate"))  # no generation after a stopped training
    # the printed command alone continues the run (it stored its overrides), in its own directory
    (command,) = [line.split("continue with: ", 1)[1] for line in stopped.stderr.splitlines()
                  if "continue with: " in line]
    assert shlex.split(command) == ["xdllm", "train", f"resume={run_dir}"]
    resumed = subprocess.run([*TRAIN[:4], f"resume={run_dir}", f"trainer.max_steps={step + 2}"],
                             capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"(step {step})" in resumed.stderr
    assert int(read_checkpoint_file(last)["global_step"]) == step + 2


@pytest.mark.slow
def test_sigterm_saves_the_step_under_way_and_exits_143(tmp_path):
    # what a job scheduler, timeout or docker stop send; Lightning alone ended the fit unsaved, status 0
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "last.ckpt"
    stopped = _interrupt([*TRAIN, f"run_dir={run_dir}"], 1, last, signal.SIGTERM)  # to workers too
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    assert "Traceback" not in stopped.stderr
    assert stopped.stderr.count("SIGTERM: stopping after this optimizer step and saving checkpoints/last.ckpt\n") == 1
    step = int(read_checkpoint_file(last)["global_step"])
    assert f"stopped by SIGTERM after step {step}, saved in {last}; continue with: xdllm train resume={run_dir}" \
        in stopped.stderr
    assert not list(run_dir.glob("generate"))


@pytest.fixture
def sigint_at_default():
    """Ctrl-C as at a terminal. A test run started in the background (``&``, as some CI runners
    do) starts with SIGINT ignored, which StopOnInterrupt rightly leaves alone."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _trainer() -> L.Trainer:
    return L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, accelerator="cpu", devices=1)


def test_the_first_ctrl_c_asks_for_a_stop_and_the_second_stops_at_once(capsys, sigint_at_default):
    saved = []
    stopper = StopOnInterrupt(save=lambda trainer: saved.append(trainer.global_step))
    before = signal.getsignal(signal.SIGINT)
    trainer, module = _trainer(), L.LightningModule()
    stopper.setup(trainer, module, "fit")
    try:
        stopper.on_train_batch_end(trainer, module, None, None, 0)  # no Ctrl-C yet: goes on
        signal.raise_signal(signal.SIGINT)
        assert "stopping after this optimizer step" in capsys.readouterr().err and saved == []
        with pytest.raises(StoppedByInterrupt, match="after step 0"):
            stopper.on_train_batch_end(trainer, module, None, None, 0)
        assert saved == [0]
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is before  # the second press handed Ctrl-C back
    finally:
        stopper.teardown(trainer, module, "fit")
        signal.signal(signal.SIGINT, before)


def test_the_handler_is_handed_back_when_the_fit_ends_and_left_alone_in_the_background(sigint_at_default):
    before = signal.getsignal(signal.SIGINT)
    stopper = StopOnInterrupt(save=lambda trainer: None)
    trainer, module = _trainer(), L.LightningModule()
    stopper.setup(trainer, module, "fit")
    assert signal.getsignal(signal.SIGINT) == stopper._on_signal
    stopper.on_exception(trainer, module, RuntimeError("a failed fit"))
    assert signal.getsignal(signal.SIGINT) is before
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # started with `&`: Ctrl-C is ignored, and stays so
    try:
        StopOnInterrupt(save=lambda trainer: None).setup(trainer, module, "fit")
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_sigterm_is_handled_while_training_runs_and_a_second_one_changes_nothing(capsys):
    saved = []
    original = signal.getsignal(signal.SIGTERM)
    stopper = StopOnInterrupt(save=lambda trainer: saved.append(trainer.global_step))
    trainer, module = _trainer(), L.LightningModule()
    try:
        stopper.setup(trainer, module, "fit")
        signal.signal(signal.SIGTERM, lambda signum, frame: pytest.fail("Lightning's handler ran"))
        stopper.on_train_start(trainer, module)  # over Lightning's, installed as the fit started
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)
        assert capsys.readouterr().err == ("\nSIGTERM: stopping after this optimizer step and saving "
                                           "checkpoints/last.ckpt\n")
        with pytest.raises(StoppedByInterrupt, match="stopped by SIGTERM after step 0") as stop:
            stopper.on_train_batch_end(trainer, module, None, None, 0)
        assert stop.value.cause == "SIGTERM" and saved == [0]
        stopper.teardown(trainer, module, "fit")
        assert signal.getsignal(signal.SIGTERM) is original  # handed back
    finally:
        signal.signal(signal.SIGTERM, original)


def test_a_ctrl_c_during_validation_says_the_validation_finishes_first(capsys, sigint_at_default):
    before = signal.getsignal(signal.SIGINT)
    stopper = StopOnInterrupt(save=lambda trainer: None)
    trainer, module = _trainer(), L.LightningModule()
    stopper.setup(trainer, module, "fit")
    trainer.validating = True
    try:
        signal.raise_signal(signal.SIGINT)
        assert "stopping after the validation under way and the next optimizer step" in capsys.readouterr().err
    finally:
        stopper.teardown(trainer, module, "fit")
        signal.signal(signal.SIGINT, before)


def test_a_second_ctrl_c_names_the_newest_saved_state(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"

    def interrupted_train(config, resume=None, overrides=(), run_log=None):
        raise TrainingInterrupted(run_dir, continue_command(run_dir))

    assert str(TrainingInterrupted(run_dir, "")) == (  # as a notebook shows it
        f"a second Ctrl-C stopped training at once; what it saved before is in {run_dir}")
    monkeypatch.setattr("xdllm.run.train.train", interrupted_train)
    assert main(["train", *TINY]) == 130
    assert f"no checkpoint was saved in {run_dir} yet" in capsys.readouterr().err
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert main(["train", *TINY]) == 130
    error = capsys.readouterr().err
    assert f"training stopped at once; the newest saved state is {run_dir / 'checkpoints' / 'last.ckpt'}" in error
    assert f"continue with: xdllm train resume={run_dir}" in error


def _children(pid: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


@pytest.mark.slow
def test_a_killed_data_worker_is_one_line_that_says_what_to_do(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("XDLLM_RUN_DIR", None)
    process = subprocess.Popen([*TRAIN, f"run_dir={run_dir}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    deadline = time.monotonic() + 120
    while not (run_dir / "checkpoints" / "last.ckpt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = _children(process.pid)
    assert workers, "the training has no DataLoader workers"
    os.kill(workers[0], signal.SIGKILL)  # as the out-of-memory killer would
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stderr[-3000:]
    # the surviving worker's descriptor-sharing thread, cut mid-handover, printed a traceback in
    # about one kill of six before xdllm.data.fd_sharing
    assert "Traceback" not in stderr, stderr[-3000:]
    (line,) = [line for line in stderr.splitlines() if line.startswith("xdllm: error:")]
    # how the death reaches the main process varies with the moment: the DataLoader's report
    # (killed by a signal, exited unexpectedly) or a reset connection to the worker
    assert "data-loading process died" in line
    assert "fewer data.num_workers (now 2)" in line
    assert f"continue from the newest checkpoint with: xdllm train resume={run_dir}" in line


def test_only_a_dead_data_worker_is_reported_as_one():
    killed = RuntimeError("DataLoader worker (pid 12) is killed by signal: Killed.")
    assert dead_worker_error(killed, 2) is killed
    assert dead_worker_error(RuntimeError("DataLoader worker (pid(s) 12) exited unexpectedly"), 2) is not None
    reset = ConnectionResetError(104, "Connection reset by peer")
    assert dead_worker_error(reset, 2) is reset
    assert dead_worker_error(reset, 0) is None
    assert dead_worker_error(RuntimeError("mat1 and mat2 shapes cannot be multiplied"), 2) is None


def test_a_dead_worker_hidden_behind_the_error_of_the_code_it_interrupted_is_found():
    # the DataLoader reports a death from its SIGCHLD handler, inside whatever runs then; seen in
    # the suite: inside inspect.getfullargspec (under Lightning's self.log), which re-raises every
    # error as TypeError('unsupported callable') from it
    killed = RuntimeError("DataLoader worker (pid 12) is killed by signal: Killed.")
    try:
        try:
            raise killed
        except Exception as error:
            raise TypeError("unsupported callable") from error
    except TypeError as wrapped:
        assert dead_worker_error(wrapped, 2) is killed
    try:
        try:
            raise killed
        except Exception:
            raise KeyError("a key")  # raised while handling it: the implicit context
    except KeyError as wrapped:
        assert dead_worker_error(wrapped, 2) is killed
        assert dead_worker_error(wrapped, 0) is None


@pytest.mark.slow
def test_under_ddp_a_ctrl_c_stops_both_processes_cleanly_with_one_message(tmp_path):
    run_dir = tmp_path / "ddp"
    last = run_dir / "checkpoints" / "last.ckpt"
    command = [*TRAIN[:-1], "data.num_workers=0", "trainer_strategy=ddp", f"run_dir={run_dir}"]
    stopped = _interrupt(command, 1, last)
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    step = int(read_checkpoint_file(last)["global_step"])
    assert stopped.stderr.count("stopped by Ctrl-C after step") == 1  # rank 0 speaks for both
    assert f"stopped by Ctrl-C after step {step}, saved in {last}" in stopped.stderr


@pytest.mark.slow
def test_under_ddp_a_sigterm_to_the_launching_process_alone_stops_both(tmp_path):
    run_dir = tmp_path / "ddp"
    last = run_dir / "checkpoints" / "last.ckpt"
    command = [*TRAIN[:-1], "data.num_workers=0", "trainer_strategy=ddp", f"run_dir={run_dir}"]
    stopped = _interrupt(command, 1, last, signal.SIGTERM, group=False)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    step = int(read_checkpoint_file(last)["global_step"])
    assert f"stopped by SIGTERM after step {step}, saved in {last}" in stopped.stderr


def test_a_dead_worker_reported_while_a_line_is_written_is_raised_not_printed(monkeypatch):
    """Seen in the suite: the report came inside the metric line's write, and logging printed a
    "--- Logging error ---" traceback instead of raising it."""
    from xdllm.cli.stderr_handler import StderrHandler

    class DiesOnFirstWrite:
        def __init__(self) -> None:
            self.written, self.calls = [], 0

        def write(self, text: str) -> None:
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("DataLoader worker (pid 12) is killed by signal: Killed.")
            self.written.append(text)

        def flush(self) -> None:
            pass

    stderr = DiesOnFirstWrite()
    monkeypatch.setattr("sys.stderr", stderr)
    logger = logging.getLogger("xdllm.test_dead_worker_in_a_write")
    logger.propagate = False
    monkeypatch.setattr(logger, "handlers", [StderrHandler()])
    with pytest.raises(RuntimeError, match="DataLoader worker"):
        logger.warning("step 7")
    assert stderr.written == []  # no "--- Logging error ---" traceback
