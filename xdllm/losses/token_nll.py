"""Building blocks shared by the dLLM losses: per-token NLL, DTensor gathering, denominators."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Integer
from torch import Tensor

Count = int | float | Tensor
"""A denominator argument: a Python number or a (possibly all-reduced) scalar tensor."""


def per_token_nll(
    logits: Float[Tensor, "batch seq_len vocab"],
    target_ids: Integer[Tensor, "batch seq_len"],
) -> Float[Tensor, "batch seq_len"]:
    """Per-token negative log-likelihood, exactly ``F.cross_entropy(..., reduction="none")``.

    Computed in the dtype of ``logits``; callers upcast first when they want float32.
    """
    batch, seq_len, vocab = logits.shape
    nll = F.cross_entropy(logits.reshape(batch * seq_len, vocab), target_ids.reshape(-1),
                          reduction="none")
    return nll.view(batch, seq_len)


_compute_per_token_nll = per_token_nll
"""The name the seed API gives :func:`per_token_nll`."""


def gather_vocab_shards(logits: Tensor) -> Tensor:
    """A plain tensor holding the full logits; a (vocab-sharded) DTensor is all-gathered.

    The gather is differentiable: the gradient flows back to the shards. A DTensor exists only
    once ``torch.distributed.tensor`` is loaded, so the check does not load it (with sympy, a
    fifth of a second of every ``xdllm generate``).
    """
    dtensors = sys.modules.get("torch.distributed.tensor")
    if dtensors is not None and isinstance(logits, dtensors.DTensor):
        return logits.full_tensor()
    return logits


def prepare_logits(logits: Tensor, fp32_upcast: bool) -> Tensor:
    """Gather DTensor logits, then upcast to float32 when asked (before any softmax)."""
    logits = gather_vocab_shards(logits)
    return logits.float() if fp32_upcast else logits


def clamped_denominator(local_count: Tensor, global_count: Count | None) -> Tensor | float:
    """The global count when given, else the local one, clamped to >= 1.

    The clamp makes an empty mask give a loss of 0 (an all-zero numerator) instead of NaN. A
    Python number stays a Python number: copying it to a GPU tensor would wait for the device.
    """
    if global_count is None:
        return local_count.to(torch.float32).clamp_min(1.0)
    if isinstance(global_count, Tensor):
        return global_count.to(local_count.device, torch.float32, non_blocking=True).clamp_min(1.0)
    return max(float(global_count), 1.0)


def next_token_nll(
    logits: Float[Tensor, "batch seq_len vocab"],
    token_ids: Integer[Tensor, "batch seq_len"],
) -> Float[Tensor, "batch seq_len-1"]:
    """NLL of token ``i + 1`` under the logits at position ``i`` (causal next-token CE)."""
    return per_token_nll(logits[:, :-1], token_ids[:, 1:])


def masked_normalised_sum(
    values: Float[Tensor, "batch seq_len"],
    mask: Bool[Tensor, "batch seq_len"],
    local_count: Tensor,
    global_count: Count | None,
) -> Float[Tensor, ""]:
    """``Σ_mask values / clamped_denominator(local_count, global_count)``, in ``values.dtype``.

    ``torch.where`` rather than a product, so an inf on an unselected position cannot leak NaN.
    """
    total = torch.where(mask, values, 0).sum()
    denominator = clamped_denominator(local_count, global_count)
    return total / (denominator.to(values.dtype) if isinstance(denominator, Tensor) else denominator)
