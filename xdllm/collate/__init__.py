"""Collators and the pieces every family's collators share: lists of tokenized samples to tensors."""

from xdllm.collate.dllm import DLLMBatch, DLLMCollator
from xdllm.collate.examples import (
    check_examples,
    check_length,
    longest_row,
    place_rows,
    supervised_tail,
    warn_split_documents,
    warn_unfilled_answers,
)
from xdllm.collate.prompts import PromptBatch, PromptCollator

__all__ = [
    "DLLMBatch",
    "DLLMCollator",
    "PromptBatch",
    "PromptCollator",
    "check_examples",
    "check_length",
    "longest_row",
    "place_rows",
    "supervised_tail",
    "warn_split_documents",
    "warn_unfilled_answers",
]
