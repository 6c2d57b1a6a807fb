"""One briefly trained run shared by the command tests (each writes its outputs elsewhere)."""

from pathlib import Path

import pytest
from tiny_run import TINY

from xdllm.cli.main import main


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", *TINY, "trainer.max_steps=6", "trainer.val_check_interval=3",
                 "generate_after_train=true", f"run_dir={run_dir}"]) == 0
    return run_dir
