"""Fixtures of the hybrid tests."""

from __future__ import annotations

import pytest
from hybrid_helpers import LetterTokenizer, tiny_hybrid


@pytest.fixture
def tokenizer() -> LetterTokenizer:
    return LetterTokenizer()


@pytest.fixture
def tiny_model(tokenizer):
    return tiny_hybrid(tokenizer.vocab_size)
