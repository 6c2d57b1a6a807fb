"""Build the shared rotary transformer from flat keyword options (Hydra): a family config names
the network's sizes as ``model.d_model=...`` rather than ``model.config.d_model=...``. Each
factory's signature is the config's (with its own options), so configuration checks see every
option and its type."""

from __future__ import annotations

import inspect
import typing
from typing import Any

from xdllm.nn.transformer import RotaryTransformer, RotaryTransformerConfig


def rotary_transformer(**options: Any) -> RotaryTransformer:
    """``RotaryTransformer(RotaryTransformerConfig(**options))``."""
    return RotaryTransformer(RotaryTransformerConfig(**options))


def denoiser_transformer(shift_outputs: bool = False, **options: Any) -> RotaryTransformer:
    """:func:`rotary_transformer` for a denoiser that reads logits at every position; with
    ``shift_outputs`` position ``j``'s logits come from the final state at ``j - 1`` (an
    autoregressive network's layout, for starting from an ``arlm`` run's weights;
    :mod:`xdllm.nn.shifted_outputs`)."""
    return RotaryTransformer(RotaryTransformerConfig(**options), shift_outputs=shift_outputs)


_CONFIG_SIGNATURE = inspect.signature(RotaryTransformerConfig)
_CONFIG_HINTS = typing.get_type_hints(RotaryTransformerConfig)

rotary_transformer.__signature__ = _CONFIG_SIGNATURE
rotary_transformer.__annotations__ = {**_CONFIG_HINTS, "return": RotaryTransformer}
denoiser_transformer.__signature__ = _CONFIG_SIGNATURE.replace(parameters=[
    *_CONFIG_SIGNATURE.parameters.values(),
    inspect.Parameter("shift_outputs", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=bool)])
denoiser_transformer.__annotations__ = {**_CONFIG_HINTS, "shift_outputs": bool, "return": RotaryTransformer}
