"""Data: tokenizers, synthetic tasks, local text files, the training stream and the Lightning datamodule.

The names below load their module on first use (PEP 562), so that importing a light module of
this package (``xdllm.data.tokenizer`` for the history views, say) does not load Lightning.
"""

from __future__ import annotations

from xdllm.lazy_names import lazy_names as _lazy_names

_MODULE_OF = {
    "DiffusionData": "datamodule",
    "DiffusionDataModule": "lightning_datamodule",
    "TrainStream": "datamodule",
    "FixedBatchSampler": "samplers",
    "StreamIndex": "samplers",
    "TrainStreamBatchSampler": "samplers",
    "even_shard_batches": "samplers",
    "SPLITS": "tasks",
    "TASKS": "tasks",
    "AdditionTask": "builtin_tasks",
    "SortTask": "builtin_tasks",
    "Task": "tasks",
    "TokenizedTask": "tasks",
    "VarLenCopyTask": "builtin_tasks",
    "VarLenSortTask": "builtin_tasks",
    "draw_sample": "tasks",
    "example": "tasks",
    "get_task": "tasks",
    "held_out_keys": "tasks",
    "TextFileTask": "text_corpus",
    "HFTokenizerFile": "tokenizer",
    "SymbolTokenizer": "tokenizer",
    "builtin_tokenizer": "tokenizer",
    "load_tokenizer": "tokenizer",
}

__all__ = sorted(_MODULE_OF)
__getattr__, __dir__ = _lazy_names(__name__, _MODULE_OF)
