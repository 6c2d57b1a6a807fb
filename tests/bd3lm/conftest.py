"""Shared pieces of the BD3-LM tests: the letter tokenizer, fixtures (helpers: bd3lm_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "predict"))
from bd3lm_helpers import random_network  # noqa: E402
from predict_fakes import LetterTokenizer  # noqa: E402

from xdllm.nn import RotaryTransformer  # noqa: E402


@pytest.fixture
def tokenizer() -> LetterTokenizer:
    return LetterTokenizer()


@pytest.fixture
def no_grad():
    with torch.no_grad():
        yield


@pytest.fixture
def network(tokenizer) -> RotaryTransformer:
    return random_network(tokenizer.vocab_size)
