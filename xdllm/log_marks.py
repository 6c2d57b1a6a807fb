"""Attributes a log record may carry (``logger.info(..., extra={STAMPED: True})``) for the handlers
that write xdllm's lines: the terminal's (:mod:`xdllm.cli.stderr_handler`) and the run's log
(:mod:`xdllm.run.run_log`), and the loggers they write for."""

EARLY_STOP_LINE = "early stopping after the validation at step {step}: {why}"
"""The line ``early_stopping`` logs when it ends a run; ``xdllm runs`` reads it back from ``train.log``."""
XDLLM_LOGGERS = ("xdllm", "xdllm_models")
"""The loggers of xdllm and of its model families (``models/``, imported as ``xdllm_models``)."""

STAMPED = "xdllm_stamped"
"""The message begins with its own time (the metric lines): the run's log adds none."""
FILE_ONLY = "xdllm_file_only"
"""For the run's log only: the metric lines where a progress bar shows the metrics on the terminal."""
