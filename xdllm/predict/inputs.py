"""The checks every predictor makes before it generates: a model, a tokenizer, a prompt batch,
the rows' sample indices, positions within the model's range."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Integer
from torch import Tensor, nn

from xdllm.interfaces import Tokenizer
from xdllm.predict.sampling import check_sampling_options

PROMPT_KEYS = ("input_ids", "attention_mask")


def takes_frozen(predictor: Any) -> bool:
    """Whether the predictor's ``predict`` has a ``frozen`` parameter: it is then called with the
    run's frozen models (``frozen=<name -> model>``), as a drafter's needs its target."""
    return "frozen" in inspect.signature(predictor.predict).parameters


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


def sample_indices(owner: str, batch: Mapping[str, Any], n_rows: int,
                   device: torch.device) -> Integer[Tensor, " batch"]:
    """Each row's ``sample_index`` (what keys its random streams), ``0..n_rows-1`` when the
    batch has none; a ValueError naming ``owner`` when its shape is not ``(n_rows,)``."""
    index = batch.get("sample_index")
    if index is None:
        return torch.arange(n_rows, device=device)
    index = torch.as_tensor(index, device=device).long()
    if index.shape != (n_rows,):
        raise ValueError(f"{owner}: batch['sample_index'] has shape {tuple(index.shape)}, expected ({n_rows},)")
    return index


def check_positions_fit(owner: str, model: nn.Module, positions: Integer[Tensor, "batch seq_len"]) -> None:
    """A ValueError naming ``owner`` when ``positions`` reach the model's ``max_positions``
    (block-aligned canvases need up to ``block_size - 1`` more than their length)."""
    limit = getattr(getattr(model, "config", None), "max_positions", None)
    highest = int(positions.max())
    if isinstance(limit, int) and highest >= limit:
        raise ValueError(f"{owner}: the block-aligned canvas reaches position {highest}, beyond the "
                         f"model's max_positions={limit}; raise model.max_positions")


def check_decoding_options(owner: str, *, max_new_tokens: int, flags: Mapping[str, object], seed: int = 0,
                           temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None) -> None:
    """The options every decoding predictor takes, checked at construction: a ValueError naming
    ``owner`` and the option when ``max_new_tokens < 1``, ``seed < 0``, a flag is not a bool, or
    the sampling options are invalid (:func:`~xdllm.predict.sampling.check_sampling_options`)."""
    if max_new_tokens < 1:
        raise ValueError(f"{owner}: max_new_tokens must be >= 1, got {max_new_tokens}")
    if seed < 0:
        raise ValueError(f"{owner}: seed must be >= 0, got {seed}")
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"{owner}: {name} must be true or false, got {value!r}")
    try:
        check_sampling_options(temperature, top_k, top_p)
    except ValueError as error:
        raise ValueError(f"{owner}: {error}") from None
