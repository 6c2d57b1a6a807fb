"""Data: tokenizers, synthetic tasks, local text files, the training stream and the Lightning datamodule."""

from xdllm.data.datamodule import DiffusionDataModule, TrainStream
from xdllm.data.samplers import FixedBatchSampler, StreamIndex, TrainStreamBatchSampler, even_shard_batches
from xdllm.data.tasks import (
    SPLITS,
    TASKS,
    AdditionTask,
    SortTask,
    Task,
    TokenizedTask,
    VarLenCopyTask,
    VarLenSortTask,
    draw_sample,
    example,
    get_task,
    held_out_keys,
)
from xdllm.data.text_corpus import TextFileTask
from xdllm.data.tokenizer import HFTokenizerFile, SymbolTokenizer, builtin_tokenizer, load_tokenizer

__all__ = [
    "SPLITS",
    "TASKS",
    "AdditionTask",
    "DiffusionDataModule",
    "FixedBatchSampler",
    "HFTokenizerFile",
    "SortTask",
    "StreamIndex",
    "SymbolTokenizer",
    "Task",
    "TextFileTask",
    "TokenizedTask",
    "TrainStream",
    "TrainStreamBatchSampler",
    "VarLenCopyTask",
    "VarLenSortTask",
    "builtin_tokenizer",
    "draw_sample",
    "even_shard_batches",
    "example",
    "get_task",
    "held_out_keys",
    "load_tokenizer",
]
