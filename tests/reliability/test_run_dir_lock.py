"""One training at a time in a run directory: a second one is refused while the first runs (as a
new run, a resume, or by moving the running one aside), and nothing is left blocking once the
first has ended, even killed outright."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.run.run_lock import LOCK_NAME

ENDLESS = [*TINY, "trainer.max_steps=100000", "trainer.val_check_interval=100000", "checkpoint.last_every_n_steps=5"]


@pytest.mark.slow
def test_a_second_training_is_refused_while_the_first_runs_and_welcome_after_it_was_killed(tmp_path, capsys):
    run_dir = tmp_path / "run"
    env = {key: value for key, value in os.environ.items() if key != "XDLLM_RUN_DIR"}
    first = subprocess.Popen([sys.executable, "-m", "xdllm.cli.main", "train", *ENDLESS, f"run_dir={run_dir}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "checkpoints" / "last.ckpt").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.poll() is None, "the first training ended before the test could race it"
        for attempt in ([], [f"resume={run_dir}"], ["existing_run_dir=move_aside"]):
            assert main(["train", *TINY, "trainer.max_steps=2", f"run_dir={run_dir}", *attempt]) == 2, attempt
            error = capsys.readouterr().err
            assert error.startswith(f"xdllm: error: run_dir {run_dir} is in use by a training still running "
                                    f"(pid {first.pid}, started "), (attempt, error)
            assert error.rstrip().endswith("; wait for it to end or stop it, or choose another run_dir"), error
        assert not list(tmp_path.glob("run.moved-*"))  # the running run was not moved aside
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert (run_dir / LOCK_NAME).is_file()  # left behind by the kill: the kernel dropped its lock
    killed_at = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"]
    assert main(["train", f"resume={run_dir}", f"trainer.max_steps={killed_at + 2}",
                 f"trainer.val_check_interval={killed_at + 2}", "data.num_workers=0"]) == 0, capsys.readouterr().err
    assert main(["train", *TINY, "trainer.max_steps=6", f"run_dir={run_dir}", "existing_run_dir=move_aside"]) == 0
    assert len(list(tmp_path.glob("run.moved-*"))) == 1
