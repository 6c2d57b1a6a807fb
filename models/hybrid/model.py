"""The hybrid network: ARLM's causal rotary transformer, plus both branches in one forward.

Called as usual (``model(ids, ...)``) it is the causal branch: the shared
:class:`~xdllm.nn.RotaryTransformer` under :class:`~xdllm.nn.CausalMask`, with the KV cache of
the core for decoding. :meth:`HybridRotaryTransformer.branches` runs one forward over the row
``[x_t | x_0]`` under :class:`~xdllm_models.hybrid.masks.HybridTrainingMask`, which gives the
diffusion branch's logits on the noisy half and the causal branch's on the clean half (or, with
``hidden_only``, the final hidden states the LM head reads, for the chunked loss). Same
parameters and state-dict keys as the other families' network.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any, NamedTuple

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.nn import RotaryTransformerConfig
from xdllm_models.arlm.model import CausalRotaryTransformer
from xdllm_models.hybrid.masks import HybridTrainingMask


class BranchLogits(NamedTuple):
    """The two branches' logits (or final hidden states) over the same ``L`` columns."""

    diffusion: Float[Tensor, "batch seq_len features"]
    causal: Float[Tensor, "batch seq_len features"]


class HybridRotaryTransformer(CausalRotaryTransformer):
    """:class:`~xdllm_models.arlm.model.CausalRotaryTransformer` with :meth:`branches`."""

    def branches(
        self,
        noisy_ids: Integer[Tensor, "batch seq_len"],
        clean_ids: Integer[Tensor, "batch seq_len"],
        attention_mask: Bool[Tensor, "batch seq_len"],
        positions: Integer[Tensor, "batch seq_len"],
        block_size: int,
        *,
        hidden_only: bool = False,
    ) -> BranchLogits:
        """Both branches from one forward over ``[noisy | clean]`` (both halves with the same
        positions and padding): the diffusion logits of ``noisy_ids`` (block ``b`` denoised from
        itself and the clean blocks before it) and the causal logits of ``clean_ids``; with
        ``hidden_only``, what the LM head reads for each (:meth:`final_hidden`)."""
        seq_len = noisy_ids.shape[1]
        forward = self.final_hidden if hidden_only else self
        out = forward(torch.cat([noisy_ids, clean_ids], dim=1),
                      attention_mask=torch.cat([attention_mask, attention_mask], dim=1),
                      positions=torch.cat([positions, positions], dim=1),
                      mask_rule=HybridTrainingMask(block_size))
        return BranchLogits(out[:, :seq_len], out[:, seq_len:])


def hybrid_rotary_transformer(**options: Any) -> HybridRotaryTransformer:
    """``HybridRotaryTransformer(RotaryTransformerConfig(**options))``, for Hydra configs that
    name the sizes directly (``model.d_model=...``); its signature is the config's."""
    return HybridRotaryTransformer(RotaryTransformerConfig(**options))


hybrid_rotary_transformer.__signature__ = inspect.signature(RotaryTransformerConfig)
hybrid_rotary_transformer.__annotations__ = {**typing.get_type_hints(RotaryTransformerConfig),
                                             "return": HybridRotaryTransformer}
