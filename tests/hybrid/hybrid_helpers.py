"""Shared pieces of the hybrid tests: the letter tokenizer, a tiny hybrid network, batches."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "predict"))
from predict_fakes import LetterTokenizer, RecordingHistory  # noqa: E402
from random_weights import sharpened  # noqa: E402

from xdllm.collate import PromptCollator  # noqa: E402
from xdllm_models.hybrid.model import HybridRotaryTransformer, hybrid_rotary_transformer  # noqa: E402

__all__ = ["LetterTokenizer", "RecordingHistory", "examples", "prompt_batch", "tiny_hybrid"]


def tiny_hybrid(vocab_size: int, max_positions: int = 64) -> HybridRotaryTransformer:
    """A tiny network with random weights that matter (:func:`random_weights.sharpened`)."""
    torch.manual_seed(0)
    model = hybrid_rotary_transformer(vocab_size=vocab_size, d_model=32, n_layers=2, n_heads=2,
                                      max_positions=max_positions).eval()
    return sharpened(model)


def examples(prompts: list[list[int]], targets: list[list[int]] | None = None, first_index: int = 0,
             step: int = 0) -> list[dict]:
    targets = targets if targets is not None else [[] for _ in prompts]
    return [{"prompt_ids": list(p), "target_ids": list(t), "sample_index": first_index + i, "step": step}
            for i, (p, t) in enumerate(zip(prompts, targets))]


def prompt_batch(tokenizer, prompts: list[list[int]], sample_index: list[int] | None = None) -> dict:
    """Left-padded ``[bos] + prompt`` rows, as the prediction collator makes them."""
    batch = PromptCollator(tokenizer)(examples(prompts))
    if sample_index is not None:
        batch["sample_index"] = torch.tensor(sample_index)
    return batch
