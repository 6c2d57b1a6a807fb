"""The optimizer's settings (``optim.*``) and the learning rate they give each optimizer step:
linear warmup, then cosine, linear, constant or warmup-stable-decay; gradient clipping by norm;
accumulation micro-batches per optimizer step. Without torch, so that the config check does not
load it (``xdllm --help`` lists the options); :mod:`xdllm.train.optim` builds the optimizer."""

from __future__ import annotations

import math
from dataclasses import dataclass

SCHEDULES = ("cosine", "linear", "constant", "wsd")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-3
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1e-8
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    schedule: str = "cosine"
    """After warmup: cosine or linear decay to ``min_lr_ratio`` at the last step, constant, or wsd
    (constant, then linear decay over the last ``decay_fraction`` of the steps)."""
    decay_fraction: float = 0.2
    gradient_clip_val: float | None = 1.0
    accumulate_grad_batches: int = 1
    fused: bool | None = None
    """Fused AdamW: None picks it when every parameter is on CUDA."""
    ema_decay: float | None = None
    """A moving average of the weights with this decay (:mod:`xdllm.train.weight_average`); None: none."""

    def __post_init__(self) -> None:
        if self.lr <= 0:
            raise ValueError(f"optim.lr must be > 0, got {self.lr}")
        if self.warmup_steps < 0:
            raise ValueError(f"optim.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"optim.schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if not 0.0 < self.decay_fraction <= 1.0:
            raise ValueError(f"optim.decay_fraction must be in (0, 1], got {self.decay_fraction}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"optim.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.gradient_clip_val is not None and self.gradient_clip_val < 0:
            raise ValueError(f"optim.gradient_clip_val must be >= 0 or null, got {self.gradient_clip_val}")
        if self.ema_decay is not None and not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"optim.ema_decay must be in [0, 1) or null, got {self.ema_decay}")
        if self.accumulate_grad_batches < 1:
            raise ValueError(f"optim.accumulate_grad_batches must be >= 1, got {self.accumulate_grad_batches}")


def lr_multiplier(step: int, config: OptimConfig, total_steps: int) -> float:
    """The learning rate of optimizer step ``step`` (from 0) over ``config.lr``: linear 0 -> 1 over
    ``warmup_steps``, then by ``config.schedule`` to ``min_lr_ratio`` at ``total_steps``: cosine,
    linear, constant (1 to the end), or wsd (1 until the last ``decay_fraction`` of the steps,
    then linear)."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    decay_start = config.warmup_steps
    if config.schedule == "wsd":
        decay_start = max(decay_start, total_steps - round(config.decay_fraction * total_steps))
    progress = min(1.0, (step - decay_start) / max(1, total_steps - decay_start)) if step >= decay_start else 0.0
    shape = 0.5 * (1.0 + math.cos(math.pi * progress)) if config.schedule == "cosine" else 1.0 - progress
    return config.min_lr_ratio + (1.0 - config.min_lr_ratio) * shape
