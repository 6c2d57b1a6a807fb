"""Batch and loss types of the MLM family (prediction batches: :class:`xdllm.collate.PromptBatch`)."""

from __future__ import annotations

from typing import Optional, TypedDict

from jaxtyping import Bool, Float, Integer
from torch import Tensor
from typing_extensions import NotRequired


class MLMBatch(TypedDict):
    """Input to the MLM during training.

    ``input_ids`` hold the corrupted canvas (mask tokens at corrupted positions), ``target_ids``
    the clean tokens. The loss is taken where ``input_ids == mask_token_id``.
    ``attention_mask`` is True on real tokens; it is omitted for packed FlexAttention batches.
    ``positions`` are RoPE positions (restarting per document in packed rows).
    ``attention_visible`` and ``attention_salt``: only while attention is annealed
    (``attention_annealing_steps``; :class:`~xdllm.nn.AnnealedCausalMask`).
    ``supervised_mask``: the supervised tokens (those the corruption may mask), which the
    likelihood bound of :class:`~xdllm_models.mlm.metrics.MLMEvaluator` scores (not named
    ``loss_mask``: the MLM loss is taken on the masked tokens, and a family loss that reads a
    ``loss_mask`` must not take an MLM batch for its own).
    """

    input_ids: Integer[Tensor, "batch seq_len"]
    target_ids: Optional[Integer[Tensor, "batch seq_len"]]
    supervised_mask: NotRequired[Bool[Tensor, "batch seq_len"]]
    attention_mask: NotRequired[Bool[Tensor, "batch seq_len"]]
    positions: NotRequired[Integer[Tensor, "batch seq_len"]]
    segment_ids: NotRequired[Integer[Tensor, "batch seq_len"]]
    sample_index: NotRequired[Integer[Tensor, " batch"]]
    attention_visible: NotRequired[Float[Tensor, ""]]
    attention_salt: NotRequired[Integer[Tensor, ""]]


class PackedFlexMLMBatch(TypedDict):
    """Packed rows from ``PackedMLMCollator``: tensors only, safe to pickle across workers.

    The FlexAttention ``BlockMask`` is built from ``segment_ids`` on the training device by the
    model, never in the collator. ``attention_visible`` and ``attention_salt`` as in
    :class:`MLMBatch`.
    """

    input_ids: Integer[Tensor, "batch seq_len"]
    target_ids: Integer[Tensor, "batch seq_len"]
    positions: Integer[Tensor, "batch seq_len"]
    segment_ids: Integer[Tensor, "batch seq_len"]
    attention_visible: NotRequired[Float[Tensor, ""]]
    attention_salt: NotRequired[Integer[Tensor, ""]]


class MLMLossDict(TypedDict):
    loss: Float[Tensor, ""]
    masked_tokens: NotRequired[Float[Tensor, ""]]

