"""Batch and loss types of the BD3-LM family (prediction batches: :class:`xdllm.collate.PromptBatch`)."""

from __future__ import annotations

from typing import TypedDict

from jaxtyping import Bool, Float, Integer
from torch import Tensor
from typing_extensions import NotRequired


class BD3LMBatch(TypedDict):
    """A training batch from :class:`~xdllm_models.bd3lm.collator.BD3LMCollator` (right-padded
    rows) or :class:`~xdllm_models.bd3lm.collator.PackedBD3LMCollator` (packed rows).

    ``target_ids``: the clean rows ``x_0``; ``input_ids``: the noisy rows ``x_t`` (corrupted
    positions hold the mask token). ``loss_mask``: True on the response and its EOS fill.
    ``noise_mask``: the corrupted positions. ``p_mask``: each position's block level t.
    ``positions``: RoPE positions, block-aligned so that every response starts a block (blocks
    are ``position // block_size``). ``attention_mask``: True on real tokens (padded rows).
    ``segment_ids``: document ids (packed rows; padding -1). ``sample_index``: global indices
    (padded rows).
    """

    input_ids: Integer[Tensor, "batch seq_len"]
    target_ids: Integer[Tensor, "batch seq_len"]
    loss_mask: Bool[Tensor, "batch seq_len"]
    noise_mask: Bool[Tensor, "batch seq_len"]
    p_mask: Float[Tensor, "batch seq_len"]
    positions: Integer[Tensor, "batch seq_len"]
    attention_mask: NotRequired[Bool[Tensor, "batch seq_len"]]
    segment_ids: NotRequired[Integer[Tensor, "batch seq_len"]]
    sample_index: NotRequired[Integer[Tensor, " batch"]]


class BD3LMLossDict(TypedDict):
    loss: Float[Tensor, ""]
    masked_tokens: Float[Tensor, ""]
