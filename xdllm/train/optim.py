"""AdamW with weight-decay groups, a learning-rate schedule per optimizer step (linear warmup,
then cosine, linear, constant or warmup-stable-decay), gradient clipping by norm, and the number
of accumulation micro-batches per optimizer step. AdamW runs fused (one kernel for all
parameters) where every parameter is on CUDA, unless told otherwise."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


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


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Matrices (linear and embedding weights) decay; vectors (norms, biases) do not."""
    decay, no_decay = [], []
    for parameter in model.parameters():
        if parameter.requires_grad:
            (decay if parameter.ndim >= 2 else no_decay).append(parameter)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


SCHEDULES = ("cosine", "linear", "constant", "wsd")


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


def uses_fused_adamw(model: torch.nn.Module, fused: bool | None) -> bool:
    """``fused`` as given, else whether every trainable parameter is a CUDA tensor."""
    if fused is not None:
        return fused
    parameters = [p for p in model.parameters() if p.requires_grad]
    return bool(parameters) and all(p.is_cuda for p in parameters)


def build_optimizer(model: torch.nn.Module, config: OptimConfig, total_steps: int):
    optimizer = torch.optim.AdamW(
        parameter_groups(model, config.weight_decay),
        lr=config.lr, betas=(config.beta1, config.beta2), eps=config.eps,
        fused=uses_fused_adamw(model, config.fused),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_multiplier(step, config, total_steps),
    )
    return optimizer, scheduler
