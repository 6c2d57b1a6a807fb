"""AdamW with weight-decay groups and, per optimizer step, the learning-rate schedule of
:mod:`xdllm.train.optim_config`. AdamW runs fused (one kernel for all parameters) where every
parameter is on CUDA, unless told otherwise."""

from __future__ import annotations

import torch

from xdllm.train.optim_config import OptimConfig, lr_multiplier


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
