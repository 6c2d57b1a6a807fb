"""A ``_target_`` that cannot be imported is one error line: no lines of Hydra's logger before it."""

import subprocess
import sys

from tiny_run import TINY


def test_an_unimportable_target_is_one_error_line(tmp_path):
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "xdllm.cli.main", "train", *TINY, "loss._target_=xdllm_no_such_module.loss.Loss",
         f"run_dir={run_dir}"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(
        "xdllm: error: loss._target_='xdllm_no_such_module.loss.Loss' cannot be imported: ")
    assert "No module named 'xdllm_no_such_module'" in result.stderr
    assert not run_dir.exists()
