"""Attention annealing: training attention opened from causal to bidirectional over the first steps.

A denoiser started from an autoregressive network's weights (``init_from=`` an ``arlm`` run)
meets bidirectional attention at once otherwise. DiffuLLaMA (Gong et al., 2025) anneals it: at
optimizer step ``s`` of the first ``steps``, each query sees the earlier tokens of its document
and each later one with probability ``s / steps`` (:class:`~xdllm.nn.AnnealedCausalMask`, drawn
afresh every step); from step ``steps`` on, training attends as validation and generation
always do, bidirectionally. The training collator puts the step's share and salt in the batch
(:func:`annealing_entries`); the loss reads them back as a mask rule (:func:`annealed_attention`,
:func:`annealed_mask_rule`). The MDLM and MLM training collators take the option.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from xdllm.interfaces import Example
from xdllm.nn.masks import AnnealedCausalMask

VISIBLE_KEY = "attention_visible"
SALT_KEY = "attention_salt"


def check_annealing_steps(steps: int, where: str) -> None:
    """A whole number of optimizer steps, 0 for none."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"{where}: attention_annealing_steps must be a whole number >= 0, got {steps!r}")


def annealing_entries(examples: Sequence[Example], steps: int) -> dict[str, Tensor]:
    """The batch entries of a training batch at the examples' optimizer step while it is below
    ``steps`` (the share of later keys seen, and the step as salt); none after, or with 0."""
    step = max(int(sample["step"]) for sample in examples)
    if step >= steps:
        return {}
    return {VISIBLE_KEY: torch.tensor(step / steps, dtype=torch.float32),
            SALT_KEY: torch.tensor(step, dtype=torch.long)}


def annealed_attention(batch: Mapping[str, Any]) -> AnnealedCausalMask | None:
    """The mask rule a batch's annealing entries name (None: the model's own rule)."""
    if VISIBLE_KEY not in batch:
        return None
    return AnnealedCausalMask(batch[VISIBLE_KEY], batch[SALT_KEY])


def annealed_mask_rule(batch: Mapping[str, Any]) -> dict[str, Any]:
    """A loss's model arguments for the batch: ``mask_rule=`` while it anneals attention, else none."""
    rule = annealed_attention(batch)
    return {} if rule is None else {"mask_rule": rule}
