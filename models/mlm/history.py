"""Denoising history for the MLM family (``HistoryTopKPlugin``).

The MLM predictor uses the shared recorder unchanged: it is re-exported here so that configs
and code can name it from the family package (``xdllm_models.mlm.history.HistoryTopKPlugin``).
"""

from xdllm.history.recorder import HistoryTopKPlugin

__all__ = ["HistoryTopKPlugin"]
