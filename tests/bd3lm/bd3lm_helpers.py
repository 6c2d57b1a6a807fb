"""A random network, examples and prompt batches for the BD3-LM tests (imported by name: a test
importing from ``conftest`` gets whichever folder's conftest was loaded last)."""

from __future__ import annotations

import torch
from random_weights import sharpened

from xdllm.collate import PromptCollator
from xdllm.nn import RotaryTransformer
from xdllm.nn.factory import rotary_transformer


def random_network(vocab_size: int, seed: int = 0, max_positions: int = 128) -> RotaryTransformer:
    """A tiny network with random weights that matter (:func:`random_weights.sharpened`)."""
    torch.manual_seed(seed)
    model = rotary_transformer(vocab_size=vocab_size, d_model=32, n_layers=2, n_heads=2,
                               max_positions=max_positions).eval()
    return sharpened(model)


def examples(prompts: list[list[int]], targets: list[list[int]] | None = None,
             first_index: int = 0, step: int = 0) -> list[dict]:
    targets = targets if targets is not None else [[] for _ in prompts]
    return [{"prompt_ids": list(p), "target_ids": list(t), "sample_index": first_index + i, "step": step}
            for i, (p, t) in enumerate(zip(prompts, targets))]


def prompt_batch(tokenizer, prompts: list[list[int]], first_index: int = 0) -> dict:
    """Left-padded ``[bos] + prompt`` rows, as the prediction collator makes them."""
    return PromptCollator(tokenizer)(examples(prompts, first_index=first_index))
