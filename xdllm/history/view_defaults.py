"""The views' defaults, which the ``xdllm history`` options show in their help: without torch,
so that building the command line does not load it."""

DEFAULT_MAX_SAMPLES = 16
"""Samples whose TensorBoard views are written per history folder."""
DEFAULT_MAX_FRAMES = 32
"""Denoising pictures per sample."""
DEFAULT_STEPS_PER_CARD = 2
"""Steps per TensorBoard text card."""
DEFAULT_MASKED_POSITIONS = 8
"""Masked positions whose top-k is listed per step (terminal replay and text cards)."""
VIEW_COMMAND = "tensorboard --logdir {logdir} --samples_per_plugin=images=1000"
"""How to look at the views written into ``logdir``."""
