"""Shared pieces of the UDLM tests: the letter tokenizer, a tiny UDLM network, examples and prompt
batches (those two as the hybrid tests make them)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "predict"))
sys.path.insert(0, str(Path(__file__).parents[1] / "hybrid"))
from hybrid_helpers import examples, prompt_batch  # noqa: E402
from predict_fakes import LetterTokenizer, RecordingHistory  # noqa: E402
from random_weights import sharpened  # noqa: E402

from xdllm_models.udlm.model import UDLMTransformer, udlm_transformer  # noqa: E402

__all__ = ["LetterTokenizer", "RecordingHistory", "examples", "prompt_batch", "tiny_udlm"]


def tiny_udlm(vocab_size: int, max_positions: int = 64) -> UDLMTransformer:
    """A tiny network with random weights that matter (:func:`random_weights.sharpened`)."""
    torch.manual_seed(0)
    model = udlm_transformer(vocab_size=vocab_size, d_model=32, n_layers=2, n_heads=2,
                             max_positions=max_positions).eval()
    return sharpened(model)
