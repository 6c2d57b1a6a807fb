"""Fixtures of the ARLM tests: the letter tokenizer, a tiny causal network (helpers: arlm_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "predict"))
from predict_fakes import LetterTokenizer  # noqa: E402
from random_weights import sharpened  # noqa: E402

from xdllm_models.arlm.model import CausalRotaryTransformer, causal_rotary_transformer  # noqa: E402


@pytest.fixture
def tokenizer() -> LetterTokenizer:
    return LetterTokenizer()


@pytest.fixture
def tiny_model(tokenizer) -> CausalRotaryTransformer:
    """A tiny network with random weights that matter (:func:`random_weights.sharpened`)."""
    torch.manual_seed(0)
    model = causal_rotary_transformer(vocab_size=tokenizer.vocab_size, d_model=32, n_layers=2, n_heads=2,
                                      max_positions=64).eval()
    return sharpened(model)
