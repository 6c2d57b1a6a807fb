"""Collators: lists of tokenized samples to training tensors."""

from xdllm.collate.dllm import DLLMBatch, DLLMCollator

__all__ = ["DLLMBatch", "DLLMCollator"]
