"""Fixtures of the ARLM tests: the letter tokenizer, a tiny causal network (helpers: arlm_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "predict"))
from predict_fakes import LetterTokenizer  # noqa: E402

from xdllm_models.arlm.model import CausalRotaryTransformer, causal_rotary_transformer  # noqa: E402


@pytest.fixture
def tokenizer() -> LetterTokenizer:
    return LetterTokenizer()


@pytest.fixture
def tiny_model(tokenizer) -> CausalRotaryTransformer:
    """Random weights large enough (std 0.3, not the init's 0.02) that every token and position
    moves the logits: a near-uniform network would hide a wrong position or a leaking mask."""
    torch.manual_seed(0)
    model = causal_rotary_transformer(vocab_size=tokenizer.vocab_size, d_model=32, n_layers=2, n_heads=2,
                                      max_positions=64).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.3)
    return model
