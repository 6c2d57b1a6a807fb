"""Shared pieces of the DFlash tests (imported by name, never from conftest): a tiny trained
arlm target run, its network with weights large enough that every token moves the logits,
drafters for it, examples and prompt batches, and broken speculative rules (to check that a
test's bound catches them)."""

from __future__ import annotations

from pathlib import Path

import torch
from random_weights import sharpened
from tiny_run import TINY_RUN

from xdllm.cli.main import main
from xdllm.collate import PromptCollator
from xdllm.data import load_tokenizer
from xdllm.predict.sampling import choose_tokens
from xdllm.run.checkpoint import load_trained
from xdllm_models.dflash.acceptance import speculative_sampling
from xdllm_models.dflash.model import DFlashDrafter

TARGET_OVERRIDES = [*(o for o in TINY_RUN if not o.startswith("experiment=")), "experiment=sort_arlm",
                    "model.d_model=32", "model.n_layers=3", "model.n_heads=2", "model.max_positions=64",
                    "trainer.max_steps=2", "trainer.val_check_interval=2"]

DRAFTER = [*(o for o in TARGET_OVERRIDES if not o.startswith(("experiment=", "model."))), "model=dflash",
           "task=sort", "model.n_heads=2", "dflash.block_size=4", "history.num_samples=2"]
"""A tiny drafter's training overrides; its target is given with ``+frozen.target=``."""


def train_target(run_dir: Path) -> Path:
    """A tiny arlm run on sort (2 steps): what a drafter reads its sizes from."""
    assert main(["train", *TARGET_OVERRIDES, f"run_dir={run_dir}"]) == 0
    return run_dir


def sharp_target(run_dir: Path, seed: int = 0) -> torch.nn.Module:
    """The run's network with weights that matter (a barely trained one is near-uniform)."""
    target = load_trained(run_dir).model
    torch.manual_seed(seed)
    return sharpened(target).requires_grad_(False)


def drafter(run_dir: Path, block_size: int = 4, seed: int = 0, **options) -> DFlashDrafter:
    torch.manual_seed(seed)
    model = DFlashDrafter(str(run_dir), block_size=block_size, n_heads=2, **options)
    return sharpened(model).eval()


def tokenizer():
    return load_tokenizer("builtin")


def examples(prompts: list[list[int]], targets: list[list[int]], first_index: int = 0, step: int = 0) -> list[dict]:
    return [{"prompt_ids": list(p), "target_ids": list(t), "sample_index": first_index + i, "step": step}
            for i, (p, t) in enumerate(zip(prompts, targets))]


def prompt_batch(prompts: list[list[int]], first_index: int = 0) -> dict:
    """Left-padded ``[bos] + prompt`` rows, as the prediction collator makes them."""
    batch = PromptCollator(tokenizer())(examples(prompts, [[] for _ in prompts], first_index))
    batch.pop("target_ids")
    return batch


def accept_every_draft(drafts, draft_probs, probs, accept_draws, token_draws):
    """A broken speculative rule, for the tests' check of their own bounds: no draft is rejected."""
    return speculative_sampling(drafts, draft_probs, probs, accept_draws * 0.0 - 1.0, token_draws)


def residual_from_the_target(drafts, draft_probs, probs, accept_draws, token_draws):
    """A broken speculative rule, for the tests' check of their own bounds: after a rejection the
    target's token comes from p instead of max(0, p - q)."""
    tokens, accepted = speculative_sampling(drafts, draft_probs, probs, accept_draws, token_draws)
    resampled = choose_tokens(probs, token_draws)
    offsets = torch.arange(tokens.shape[1], device=tokens.device)
    return torch.where(offsets == accepted[:, None], resampled, tokens), accepted
