"""Build a :class:`~xdllm.nn.transformer.RotaryTransformer` from flat keyword options (Hydra)."""

from __future__ import annotations

import inspect
import typing
from typing import Any

from xdllm.nn.transformer import RotaryTransformer, RotaryTransformerConfig


def rotary_transformer(**options: Any) -> RotaryTransformer:
    """``RotaryTransformer(RotaryTransformerConfig(**options))``: lets a family config name the
    network's sizes as ``model.d_model=...`` rather than ``model.config.d_model=...``. Its
    signature is the config's, so configuration checks see every option and its type."""
    return RotaryTransformer(RotaryTransformerConfig(**options))


rotary_transformer.__signature__ = inspect.signature(RotaryTransformerConfig)
rotary_transformer.__annotations__ = {**typing.get_type_hints(RotaryTransformerConfig),
                                      "return": RotaryTransformer}
