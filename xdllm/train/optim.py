"""AdamW with weight-decay groups and, per optimizer step, the learning-rate schedule of
:mod:`xdllm.train.optim_config`. AdamW runs fused (one kernel for all parameters) where every
parameter is on CUDA, unless told otherwise."""

from __future__ import annotations

import torch

from xdllm.train.optim_config import OptimConfig, lr_multiplier


def group_weight_decays(config: OptimConfig) -> tuple[float, float]:
    """The weight decay of each parameter group, in :func:`parameter_groups`' order."""
    return config.weight_decay, 0.0


def parameter_groups(model: torch.nn.Module, config: OptimConfig) -> list[dict]:
    """Matrices (linear and embedding weights) decay; vectors (norms, biases) do not."""
    decay, no_decay = [], []
    for parameter in model.parameters():
        if parameter.requires_grad:
            (decay if parameter.ndim >= 2 else no_decay).append(parameter)
    return [{"params": params, "weight_decay": weight_decay}
            for params, weight_decay in zip((decay, no_decay), group_weight_decays(config))]


def uses_fused_adamw(model: torch.nn.Module, fused: bool | None) -> bool:
    """``fused`` as given, else whether every trainable parameter is a CUDA tensor."""
    if fused is not None:
        return fused
    parameters = [p for p in model.parameters() if p.requires_grad]
    return bool(parameters) and all(p.is_cuda for p in parameters)


def build_optimizer(model: torch.nn.Module, config: OptimConfig, total_steps: int):
    optimizer = torch.optim.AdamW(
        parameter_groups(model, config),
        lr=config.lr, betas=(config.beta1, config.beta2), eps=config.eps,
        fused=uses_fused_adamw(model, config.fused),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_multiplier(step, config, total_steps),
    )
    return optimizer, scheduler



def apply_settings(optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LambdaLR,
                   config: OptimConfig) -> list[str]:
    """Give an optimizer and schedule restored from a checkpoint ``config``'s learning rate,
    weight decay, betas and eps (a checkpoint carries the values of the run that saved it, so a
    run resumed with ``optim.lr=`` would otherwise go on at the old rate); the moments are kept.
    The current step's rate comes from ``scheduler``'s own schedule (built from this run's
    config). Returns the settings that changed, as ``"optim.lr 0.001 -> 0.0003"``."""
    changes: dict[str, str] = {}
    for index, (group, weight_decay) in enumerate(zip(optimizer.param_groups, group_weight_decays(config))):
        before = {"lr": scheduler.base_lrs[index], "weight_decay": group["weight_decay"],
                  "beta1": group["betas"][0], "beta2": group["betas"][1], "eps": group["eps"]}
        after = {"lr": config.lr, "weight_decay": weight_decay, "beta1": config.beta1, "beta2": config.beta2,
                 "eps": config.eps}
        for name, value in before.items():
            if value != after[name]:
                changes.setdefault(name, f"optim.{name} {value:g} -> {after[name]:g}")
        group.update(weight_decay=weight_decay, betas=(config.beta1, config.beta2), eps=config.eps,
                     initial_lr=config.lr, lr=config.lr * scheduler.lr_lambdas[index](scheduler.last_epoch))
        scheduler.base_lrs[index] = config.lr
    return list(changes.values())
