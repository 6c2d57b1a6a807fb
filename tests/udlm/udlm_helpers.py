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

from xdllm_models.udlm.model import UDLMTransformer, udlm_transformer  # noqa: E402

__all__ = ["LetterTokenizer", "RecordingHistory", "examples", "prompt_batch", "tiny_udlm"]


def tiny_udlm(vocab_size: int, max_positions: int = 64) -> UDLMTransformer:
    """Random weights large enough (std 0.3, not the init's 0.02) that every token and position
    moves the logits: a near-uniform network would hide a wrong position or a leaking mask."""
    torch.manual_seed(0)
    model = udlm_transformer(vocab_size=vocab_size, d_model=32, n_layers=2, n_heads=2,
                             max_positions=max_positions).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.3)
    return model
