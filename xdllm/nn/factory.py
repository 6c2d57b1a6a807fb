"""Build a :class:`~xdllm.nn.transformer.RotaryTransformer` from flat keyword options (Hydra)."""

from __future__ import annotations

from typing import Any

from xdllm.nn.transformer import RotaryTransformer, RotaryTransformerConfig


def rotary_transformer(vocab_size: int, **options: Any) -> RotaryTransformer:
    """``RotaryTransformer(RotaryTransformerConfig(vocab_size, **options))``: lets a family
    config name the network's sizes as ``model.d_model=...`` rather than ``model.config.*``."""
    return RotaryTransformer(RotaryTransformerConfig(vocab_size=vocab_size, **options))
