"""The checks every predictor makes before it generates: a model, a tokenizer, a prompt batch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from xdllm.interfaces import Tokenizer

PROMPT_KEYS = ("input_ids", "attention_mask")


def require_tokenizer(owner: str, tokenizer: Tokenizer | None) -> Tokenizer:
    """``tokenizer``, or a ValueError naming ``owner`` when there is none."""
    if tokenizer is None:
        raise ValueError(f"{owner} needs a tokenizer (pad, mask, bos and eos ids); pass tokenizer=...")
    return tokenizer


def check_prompt_batch(owner: str, batch: Mapping[str, Any]) -> None:
    """A KeyError naming ``owner`` and the batch's keys when a prompt key is missing."""
    for key in PROMPT_KEYS:
        if key not in batch:
            raise KeyError(f"{owner}: prediction batch has no {key!r} (keys: {sorted(batch)})")


def predictor_inputs(owner: str, batch: Mapping[str, Any], model: nn.Module | None,
                     default_model: nn.Module | None, tokenizer: Tokenizer | None) -> tuple[nn.Module, Tokenizer]:
    """The model to run (``model``, else the predictor's ``default_model``) and the tokenizer,
    after checking that both exist and that ``batch`` holds a prompt."""
    model = model if model is not None else default_model
    if model is None:
        raise ValueError(f"{owner}: no model; pass model= to the predictor or to predict()")
    tokenizer = require_tokenizer(owner, tokenizer)
    check_prompt_batch(owner, batch)
    return model, tokenizer
