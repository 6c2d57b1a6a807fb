"""Shared fixtures: a throwaway model-family package outside the repo, one torch thread."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from model_package_factory import write_model_package


@pytest.fixture
def external_models(tmp_path: Path) -> Path:
    """A folder outside the repo holding one uninstalled model package, family 'toyfam'."""
    package = f"xdllm_test_toyfam_{uuid.uuid4().hex[:8]}"  # a fresh import name per test
    return write_model_package(tmp_path / "external_models", package, "toyfam")


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Tests use tiny tensors: one thread avoids OpenMP contention on small CI machines."""
    import torch

    torch.set_num_threads(1)
