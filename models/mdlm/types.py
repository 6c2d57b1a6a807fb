"""Batch and loss types of the MDLM family."""

from __future__ import annotations

from typing import TypedDict

from jaxtyping import Bool, Float, Integer
from torch import Tensor
from typing_extensions import NotRequired


class MDLMBatch(TypedDict):
    """A training batch from :class:`~xdllm_models.mdlm.collator.MDLMCollator`.

    ``target_ids``: the clean rows ``[bos] + prompt + response (+ EOS fill) + pad``.
    ``input_ids``: the same rows with corrupted positions replaced by the mask token.
    ``loss_mask``: 1 on supervised positions (the response and its fill; never bos, prompt or
    padding). ``noise_mask``: the corrupted positions (a subset of the supervised ones).
    ``p_mask``: each row's (or block's) masking level t. ``attention_mask``: True on real
    tokens, the fill included. ``sample_index``: the samples' global indices.
    ``attention_visible`` and ``attention_salt``: only while attention is annealed
    (``attention_annealing_steps``): the share of later keys each query sees and the salt of
    which (:class:`~xdllm.nn.AnnealedCausalMask`).
    """

    input_ids: Integer[Tensor, "batch seq_len"]
    target_ids: Integer[Tensor, "batch seq_len"]
    loss_mask: Float[Tensor, "batch seq_len"]
    noise_mask: Bool[Tensor, "batch seq_len"]
    p_mask: Float[Tensor, "batch seq_len"]
    attention_mask: Bool[Tensor, "batch seq_len"]
    sample_index: Integer[Tensor, " batch"]
    attention_visible: NotRequired[Float[Tensor, ""]]
    attention_salt: NotRequired[Integer[Tensor, ""]]


class MDLMLossDict(TypedDict):
    loss: Float[Tensor, ""]
    masked_tokens: Float[Tensor, ""]
