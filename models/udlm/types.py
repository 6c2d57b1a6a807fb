"""Batch and loss types of the UDLM family (prediction batches: :class:`xdllm.collate.PromptBatch`)."""

from __future__ import annotations

from typing import TypedDict

from jaxtyping import Bool, Float, Integer
from torch import Tensor


class UDLMBatch(TypedDict):
    """A training batch from :class:`~xdllm_models.udlm.collator.UDLMCollator`.

    The encoder row: ``input_ids`` = clean ``[bos] + prompt + response (+ EOS fill to whole
    blocks) + pad``, ``attention_mask`` True on real tokens, ``loss_mask`` 1 on the response and
    its fill, ``positions`` shifted so that the response starts on a block boundary.
    The canvas (one response block per row): ``canvas_block`` its index in the response,
    ``canvas_target_ids`` its clean tokens, ``canvas_input_ids`` the same with uniform random
    tokens at the corrupted places (``canvas_noise_mask``; a replacement may equal the
    original), ``canvas_loss_mask`` its supervised positions, ``canvas_p_mask`` all ones (flat
    loss), ``canvas_positions`` its RoPE positions. ``sample_index``: the samples' global indices.
    """

    input_ids: Integer[Tensor, "batch seq_len"]
    attention_mask: Bool[Tensor, "batch seq_len"]
    loss_mask: Float[Tensor, "batch seq_len"]
    positions: Integer[Tensor, "batch seq_len"]
    canvas_block: Integer[Tensor, " batch"]
    canvas_input_ids: Integer[Tensor, "batch block"]
    canvas_target_ids: Integer[Tensor, "batch block"]
    canvas_noise_mask: Bool[Tensor, "batch block"]
    canvas_loss_mask: Float[Tensor, "batch block"]
    canvas_p_mask: Float[Tensor, "batch block"]
    canvas_positions: Integer[Tensor, "batch block"]
    sample_index: Integer[Tensor, " batch"]


class UDLMLossDict(TypedDict):
    loss: Float[Tensor, ""]
    diffusion_loss: Float[Tensor, ""]
    encoder_loss: Float[Tensor, ""]
