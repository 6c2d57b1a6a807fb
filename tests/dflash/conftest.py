"""Fixtures of the DFlash tests: one tiny arlm target run per session (helpers: dflash_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dflash_helpers import train_target


@pytest.fixture(scope="session")
def target_run(tmp_path_factory) -> Path:
    return train_target(tmp_path_factory.mktemp("dflash-target") / "run")
