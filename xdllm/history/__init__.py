"""Denoising history: the recorder the predictor calls every step, its files, and its views.

- :class:`HistoryTopKPlugin` records top-k alternatives, canvases and commits per step;
- :func:`load_history` / :class:`HistoryFile` / :class:`SampleHistory` read them back;
- :func:`write_tensorboard` renders them for TensorBoard, :func:`format_replay` for a terminal,
  :class:`DenoisingFigure` as a picture (a PIL image, which a notebook shows inline).

File format and usage: ``docs/history.md``.
"""

import importlib

from xdllm.history.format import FORMAT_NAME, FORMAT_VERSION, HistoryError, HistoryFormatError
from xdllm.history.reader import HistoryFile, SampleHistory, iter_samples, load_history
from xdllm.history.recorder import HistoryTopKPlugin
from xdllm.history.show import format_replay
from xdllm.history.storage import find_history_files, read_history_file
from xdllm.history.tensorboard import write_tensorboard

_DRAWING = {"DenoisingFigure": "xdllm.history.figures"}
"""Imported on first use: it loads matplotlib (a third of ``xdllm --help``'s start), which
recording and reading history never need; :func:`write_tensorboard` loads it when it draws."""

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "DenoisingFigure",
    "HistoryError",
    "HistoryFile",
    "HistoryFormatError",
    "HistoryTopKPlugin",
    "SampleHistory",
    "find_history_files",
    "format_replay",
    "iter_samples",
    "load_history",
    "read_history_file",
    "write_tensorboard",
]


def __getattr__(name: str) -> object:
    if name not in _DRAWING:
        raise AttributeError(f"module 'xdllm.history' has no attribute {name!r}")
    return getattr(importlib.import_module(_DRAWING[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_DRAWING})
