"""Denoising history: the recorder the predictor calls every step, its files, and its views.

- :class:`HistoryTopKPlugin` records top-k alternatives, canvases and commits per step;
- :func:`load_history` / :class:`HistoryFile` / :class:`SampleHistory` read them back;
- :func:`write_tensorboard` renders them for TensorBoard, :func:`format_replay` for a terminal,
  :class:`DenoisingFigure` as a picture (a PIL image, which a notebook shows inline).

File format and usage: ``docs/history.md``.
"""

import importlib

_MODULE_OF = {
    "FORMAT_NAME": "format",
    "FORMAT_VERSION": "format",
    "HistoryError": "format",
    "HistoryFormatError": "format",
    "HistoryFile": "reader",
    "SampleHistory": "reader",
    "iter_samples": "reader",
    "load_history": "reader",
    "HistoryTopKPlugin": "recorder",
    "format_replay": "show",
    "find_history_files": "storage",
    "read_history_file": "storage",
    "write_tensorboard": "tensorboard",
    "DenoisingFigure": "figures",
}
"""Each name loads its module on first use (PEP 562): the package's light modules (the views'
defaults, which ``xdllm --help`` shows) load without torch, and :class:`DenoisingFigure` loads
matplotlib only where a view is drawn (recording and reading history never need it)."""

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> object:
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'xdllm.history' has no attribute {name!r}")
    return getattr(importlib.import_module(f"xdllm.history.{_MODULE_OF[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
