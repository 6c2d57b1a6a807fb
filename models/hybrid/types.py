"""Batch and loss types of the hybrid family (prediction batches: :class:`xdllm.collate.PromptBatch`)."""

from __future__ import annotations

from typing import TypedDict

from jaxtyping import Bool, Float, Integer
from torch import Tensor


class HybridBatch(TypedDict):
    """A training batch from :class:`~xdllm_models.hybrid.collator.HybridCollator`.

    ``target_ids``: the clean rows ``x_0 = [bos] + prompt + response (+ EOS fill to whole
    blocks) + pad``. ``input_ids``: the same rows with corrupted response positions replaced by
    the mask token (``x_t``). ``loss_mask``: 1 on the response and its fill (what both branches
    learn). ``noise_mask``: the corrupted positions. ``p_mask``: each block's masking level.
    ``attention_mask``: True on real tokens. ``positions``: RoPE positions, shifted so that the
    response starts on a block boundary (:mod:`~xdllm_models.hybrid.layout`).
    ``sample_index``: the samples' global indices.
    """

    input_ids: Integer[Tensor, "batch seq_len"]
    target_ids: Integer[Tensor, "batch seq_len"]
    loss_mask: Float[Tensor, "batch seq_len"]
    noise_mask: Bool[Tensor, "batch seq_len"]
    p_mask: Float[Tensor, "batch seq_len"]
    attention_mask: Bool[Tensor, "batch seq_len"]
    positions: Integer[Tensor, "batch seq_len"]
    sample_index: Integer[Tensor, " batch"]


class HybridLossDict(TypedDict):
    loss: Float[Tensor, ""]
    diffusion_loss: Float[Tensor, ""]
    ar_loss: Float[Tensor, ""]
