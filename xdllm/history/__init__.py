"""Denoising history: the recorder the predictor calls every step, its files, and its views.

- :class:`HistoryTopKPlugin` records top-k alternatives, canvases and commits per step;
- :func:`load_history` / :class:`HistoryFile` / :class:`SampleHistory` read them back;
- :func:`write_tensorboard` renders them for TensorBoard, :func:`format_replay` for a terminal,
  :class:`DenoisingFigure` as a picture (a PIL image, which a notebook shows inline).

File format and usage: ``docs/history.md``.
"""

from xdllm.lazy_names import lazy_names as _lazy_names

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
__getattr__, __dir__ = _lazy_names(__name__, _MODULE_OF)
