"""The ARLM network: the shared :class:`~xdllm.nn.RotaryTransformer`, causal by default.

The same weights, sizes and state-dict keys as the diffusion families' network; only the mask
rule differs: :class:`~xdllm.nn.CausalMask` (a token sees the tokens of its document at
positions up to its own) unless the caller names another rule or a prebuilt block mask.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from xdllm.nn import CausalMask, RotaryTransformer, RotaryTransformerConfig


class CausalRotaryTransformer(RotaryTransformer):
    """:class:`~xdllm.nn.RotaryTransformer` whose default mask rule is :class:`~xdllm.nn.CausalMask`
    (in :meth:`forward` and :meth:`final_hidden`; a given ``block_mask`` is used as is)."""

    default_mask_rule = CausalMask()


def causal_rotary_transformer(**options: Any) -> CausalRotaryTransformer:
    """``CausalRotaryTransformer(RotaryTransformerConfig(**options))``, for Hydra configs that
    name the sizes directly (``model.d_model=...``); its signature is the config's."""
    return CausalRotaryTransformer(RotaryTransformerConfig(**options))


causal_rotary_transformer.__signature__ = inspect.signature(RotaryTransformerConfig)
causal_rotary_transformer.__annotations__ = {**typing.get_type_hints(RotaryTransformerConfig),
                                             "return": CausalRotaryTransformer}
