"""The ARLM network: the shared :class:`~xdllm.nn.RotaryTransformer`, causal by default.

The same weights, sizes and state-dict keys as the diffusion families' network; only the mask
rule differs: :class:`~xdllm.nn.CausalMask` (a token sees the tokens of its document at
positions up to its own) unless the caller names another rule or a prebuilt block mask.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Sequence
from typing import Any, Optional, Union

from jaxtyping import Bool, Float, Integer
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask

from xdllm.nn import CausalMask, KVCache, MaskRule, RotaryTransformer, RotaryTransformerConfig, TransformerOutput


class CausalRotaryTransformer(RotaryTransformer):
    """:class:`~xdllm.nn.RotaryTransformer` whose default mask rule is :class:`~xdllm.nn.CausalMask`."""

    def forward(
        self,
        input_ids: Integer[Tensor, "batch seq_len"],
        attention_mask: Optional[Bool[Tensor, "batch seq_len"]] = None,
        positions: Optional[Integer[Tensor, "batch seq_len"]] = None,
        segment_ids: Optional[Integer[Tensor, "batch seq_len"]] = None,
        block_mask: Optional[BlockMask] = None,
        *,
        mask_rule: Optional[MaskRule] = None,
        output_hidden_states: Optional[Sequence[int]] = None,
        kv_cache: Optional[KVCache] = None,
        write_cache: bool = True,
    ) -> Union[Float[Tensor, "batch seq_len vocab"], TransformerOutput]:
        """:meth:`RotaryTransformer.forward` with ``mask_rule`` defaulting to causal (a given
        ``block_mask`` is used as is)."""
        if mask_rule is None and block_mask is None:
            mask_rule = CausalMask()
        return super().forward(input_ids, attention_mask, positions, segment_ids, block_mask,
                               mask_rule=mask_rule, output_hidden_states=output_hidden_states,
                               kv_cache=kv_cache, write_cache=write_cache)


def causal_rotary_transformer(**options: Any) -> CausalRotaryTransformer:
    """``CausalRotaryTransformer(RotaryTransformerConfig(**options))``, for Hydra configs that
    name the sizes directly (``model.d_model=...``); its signature is the config's."""
    return CausalRotaryTransformer(RotaryTransformerConfig(**options))


causal_rotary_transformer.__signature__ = inspect.signature(RotaryTransformerConfig)
causal_rotary_transformer.__annotations__ = {**typing.get_type_hints(RotaryTransformerConfig),
                                             "return": CausalRotaryTransformer}
