"""Batch and prediction types of the DFlash family (prediction batches: :class:`xdllm.collate.PromptBatch`)."""

from __future__ import annotations

from typing import TypedDict

from jaxtyping import Bool, Integer
from torch import Tensor

from xdllm.interfaces import PredictionDict


class DFlashBatch(TypedDict):
    """A training batch from :class:`~xdllm_models.dflash.collator.DFlashCollator`.

    ``input_ids`` / ``attention_mask``: clean right-padded ``[bos] + prompt + response`` rows,
    what the target reads (its hidden states are the drafter's context). ``anchor_positions``:
    the columns where each drafted block starts (its clean first token); ``anchor_valid``: False
    for padding blocks of rows with fewer anchors than the batch's block count.
    ``sample_index``: the samples' global indices.
    """

    input_ids: Integer[Tensor, "batch seq_len"]
    attention_mask: Bool[Tensor, "batch seq_len"]
    anchor_positions: Integer[Tensor, "batch blocks"]
    anchor_valid: Bool[Tensor, "batch blocks"]
    sample_index: Integer[Tensor, " batch"]


class SpeculativePredictionDict(PredictionDict):
    """:class:`~xdllm.interfaces.PredictionDict` plus the cost of speculative decoding per sample:
    ``target_passes`` (the prompt's pass and one per verification), ``draft_passes`` and
    ``generated_tokens`` (tokens written, EOS included)."""

    target_passes: list[int]
    draft_passes: list[int]
    generated_tokens: list[int]
