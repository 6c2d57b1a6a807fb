"""Shared fixtures: a throwaway model-family package outside the repo, one torch thread, a count of
FlexAttention compilations."""

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


@pytest.fixture
def flex_compile_counter(monkeypatch):
    """Flex compiled with dynamo's counting backend (graphs run eagerly) instead of inductor, from
    a clean dynamo cache: ``frame_count`` is the number of compilations."""
    import torch
    from torch._dynamo.testing import CompileCounter
    from torch.nn.attention.flex_attention import flex_attention

    from xdllm.nn import attention as attention_module

    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(flex_attention, backend=counter, dynamic=False)
    monkeypatch.setattr(attention_module, "_compiled_flex_attention", lambda: compiled)
    yield counter
    torch._dynamo.reset()
