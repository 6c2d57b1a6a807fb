"""xdllm's DataLoader workers ignore stop signals from others and obey the main process's SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

LOADER = textwrap.dedent("""
    import sys
    from torch.utils.data import DataLoader
    from xdllm.data.worker_signals import ignore_stop_signals
    loader = DataLoader(list(range(64)), batch_size=2, num_workers=2, worker_init_fn=ignore_stop_signals)
    batches = iter(loader)
    next(batches)
    print(*(worker.pid for worker in batches._workers), flush=True)
""")


def _run(script: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_the_process_exits_while_a_worker_is_still_running():
    # an error mid-training keeps the loader's iterator alive until Python exits; Python's exit then
    # sends SIGTERM to each worker and waits for it without a time limit (an ignored one hung)
    process = _run(LOADER)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "exited unexpectedly" not in stderr and "Traceback" not in stderr, stderr


def test_a_sigterm_from_another_process_leaves_the_worker_running():
    process = _run(LOADER + "input()\nprint(sum(len(batch) for batch in batches) + 2)\n")
    worker = int(process.stdout.readline().split()[0])
    os.kill(worker, signal.SIGTERM)  # as a scheduler's SIGTERM to the job's process group
    time.sleep(1.0)
    assert _alive(worker)
    stdout, stderr = process.communicate("\n", timeout=60)
    assert process.returncode == 0, stderr
    assert stdout.split() == ["64"]


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
