"""The UDLM network: one rotary transformer that is both the causal encoder and the canvas denoiser.

Called as usual (``model(ids, ...)``) it is the encoder: the shared
:class:`~xdllm.nn.RotaryTransformer` under :class:`~xdllm.nn.CausalMask`, with the core's KV
cache for decoding. :meth:`UDLMTransformer.canvas_and_encoder` runs one forward over
``[canvas | encoder row]`` under :class:`~xdllm_models.udlm.masks.EncoderCanvasMask`: the
canvas (one response block) is denoised bidirectionally from itself and the encoder's states
of the prompt and the clean blocks before it, and the encoder row gets its next-token logits.
Encoder and denoiser share every weight; the mask alone tells the roles apart. Same
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
from xdllm_models.udlm.masks import EncoderCanvasMask


class CanvasEncoderLogits(NamedTuple):
    """The canvas's denoising logits and the encoder row's next-token logits (or the final
    hidden states the LM head reads for each)."""

    canvas: Float[Tensor, "batch block features"]
    encoder: Float[Tensor, "batch seq_len features"]


class UDLMTransformer(CausalRotaryTransformer):
    """:class:`~xdllm_models.arlm.model.CausalRotaryTransformer` with :meth:`canvas_and_encoder`."""

    def canvas_and_encoder(
        self,
        canvas_ids: Integer[Tensor, "batch block"],
        canvas_positions: Integer[Tensor, "batch block"],
        encoder_ids: Integer[Tensor, "batch seq_len"],
        attention_mask: Bool[Tensor, "batch seq_len"],
        positions: Integer[Tensor, "batch seq_len"],
        block_size: int,
        *,
        hidden_only: bool = False,
    ) -> CanvasEncoderLogits:
        """Both roles from one forward; ``positions`` must put blocks at ``position // block_size``
        and the canvas positions inside one such block. With ``hidden_only``, what the LM head
        reads (:meth:`final_hidden`), for the chunked loss."""
        canvas_len = canvas_ids.shape[1]
        forward = self.final_hidden if hidden_only else self
        out = forward(torch.cat([canvas_ids, encoder_ids], dim=1),
                      attention_mask=torch.cat([torch.ones_like(canvas_ids, dtype=torch.bool), attention_mask], 1),
                      positions=torch.cat([canvas_positions, positions], dim=1),
                      mask_rule=EncoderCanvasMask(block_size, canvas_len))
        return CanvasEncoderLogits(out[:, :canvas_len], out[:, canvas_len:])


def udlm_transformer(**options: Any) -> UDLMTransformer:
    """``UDLMTransformer(RotaryTransformerConfig(**options))``, for Hydra configs that name the
    sizes directly (``model.d_model=...``); its signature is the config's."""
    return UDLMTransformer(RotaryTransformerConfig(**options))


udlm_transformer.__signature__ = inspect.signature(RotaryTransformerConfig)
udlm_transformer.__annotations__ = {**typing.get_type_hints(RotaryTransformerConfig), "return": UDLMTransformer}
