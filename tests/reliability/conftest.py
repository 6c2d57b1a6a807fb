"""A briefly trained run with 64 test samples, for the tests that generate from it (each writes its
generations into its own folder, or checks that it wrote none)."""

from pathlib import Path

import pytest
from tiny_run import TINY

from xdllm.cli.main import main


@pytest.fixture(scope="session")
def run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("generation") / "run"
    assert main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", "data.num_test_samples=64",
                 f"run_dir={run_dir}"]) == 0
    return run_dir
