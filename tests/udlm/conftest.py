"""Fixtures of the UDLM tests (helpers: udlm_helpers.py)."""

from __future__ import annotations

import pytest
from udlm_helpers import LetterTokenizer, tiny_udlm


@pytest.fixture
def tokenizer() -> LetterTokenizer:
    return LetterTokenizer()


@pytest.fixture
def tiny_model(tokenizer):
    return tiny_udlm(tokenizer.vocab_size)
