"""Batch and loss types of the ARLM family (prediction batches: :class:`xdllm.collate.PromptBatch`)."""

from __future__ import annotations

from typing import TypedDict

from jaxtyping import Bool, Float, Integer
from torch import Tensor
from typing_extensions import NotRequired


class ARLMBatch(TypedDict):
    """A training batch from :class:`~xdllm_models.arlm.collator.ARLMCollator` or
    :class:`~xdllm_models.arlm.collator.PackedARLMCollator`.

    ``input_ids``: the clean rows, ``[bos] + prompt + response`` per document (right-padded,
    or packed). ``loss_mask``: True on the tokens the model must predict from the tokens before
    them (the response: target and EOS); never on a document's first token, so the next-token
    shift never crosses a document boundary. ``attention_mask``: True on real tokens (padded
    rows). ``positions`` / ``segment_ids``: RoPE positions and document ids (packed rows; padding
    has segment id -1). ``sample_index``: the samples' global indices (padded rows).
    """

    input_ids: Integer[Tensor, "batch seq_len"]
    loss_mask: Bool[Tensor, "batch seq_len"]
    attention_mask: NotRequired[Bool[Tensor, "batch seq_len"]]
    positions: NotRequired[Integer[Tensor, "batch seq_len"]]
    segment_ids: NotRequired[Integer[Tensor, "batch seq_len"]]
    sample_index: NotRequired[Integer[Tensor, " batch"]]


class ARLMLossDict(TypedDict):
    loss: Float[Tensor, ""]
    supervised_tokens: Float[Tensor, ""]
