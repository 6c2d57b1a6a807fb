"""Examples and prompt batches for the ARLM tests (imported by name: a test importing from
``conftest`` gets whichever folder's conftest was loaded last)."""

from __future__ import annotations

import torch

from xdllm.collate import PromptCollator


def examples(prompts: list[list[int]], targets: list[list[int]] | None = None,
             first_index: int = 0) -> list[dict]:
    targets = targets if targets is not None else [[] for _ in prompts]
    return [{"prompt_ids": list(p), "target_ids": list(t), "sample_index": first_index + i, "step": 0}
            for i, (p, t) in enumerate(zip(prompts, targets))]


def prompt_batch(tokenizer, prompts: list[list[int]], sample_index: list[int] | None = None) -> dict:
    """Left-padded ``[bos] + prompt`` rows, as the prediction collator makes them."""
    batch = PromptCollator(tokenizer)(examples(prompts))
    if sample_index is not None:
        batch["sample_index"] = torch.tensor(sample_index)
    return batch
