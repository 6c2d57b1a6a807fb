"""How many positions a row unmasks in a step, and which ones.

Scheduled count (no threshold): a row with ``n`` masks left in its current block, ``w`` steps
left before the block's deadline, and a block window of ``W`` steps (from the step the block
became current to its deadline) sits at diffusion time ``t = w / W``; after the step it should
be at ``t' = (w - 1) / W``. Under a noise schedule with masking probability ``m(t)`` the
expected share of the current masks that stays masked is ``m(t') / m(t)``, so the step unmasks
``ceil(n (1 - m(t') / m(t)))`` positions, clamped to ``[1, n]``. The last step (``t' = 0``)
unmasks everything left, so every block finishes by its deadline; every step unmasks at least
one position, so no forward pass is wasted. Without a schedule (the default) the count is the
exact integer ``ceil(n / w)``, which is what the linear schedule gives.

With a threshold the scheduled count becomes a floor: every candidate whose confidence is
``>= threshold`` is committed as well. When ``max_steps`` is at least the number of masks the
floor is 1, i.e. "everything above the threshold, at least the most confident one".
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.diffusion.schedules import NoiseSchedule

_ROUNDING_SLACK = 1e-9


def scheduled_count(n_masked: Integer[Tensor, " batch"], steps_left: Integer[Tensor, " batch"],
                    window: Integer[Tensor, " batch"],
                    schedule: NoiseSchedule | None) -> Integer[Tensor, " batch"]:
    """Positions to unmask this step (0 only for rows with nothing masked)."""
    steps_left = steps_left.clamp(min=1)
    if schedule is None:
        count = (n_masked + steps_left - 1) // steps_left
    else:
        window = torch.maximum(window, steps_left).double()
        now = schedule.mask_prob(steps_left.double() / window)
        after = schedule.mask_prob((steps_left - 1).double() / window)
        share = 1.0 - after / now
        count = torch.ceil(n_masked.double() * share - _ROUNDING_SLACK).long()
    return torch.minimum(count.clamp(min=1), n_masked)


def select_positions(scores: Float[Tensor, "batch region"],
                     candidates: Bool[Tensor, "batch region"],
                     count: Integer[Tensor, " batch"],
                     threshold: float | None) -> Bool[Tensor, "batch region"]:
    """The ``count`` best-scoring candidates per row (earlier offset wins ties), plus every
    candidate scoring ``>= threshold`` when one is given."""
    ranked = torch.where(candidates, scores, float("-inf"))
    order = ranked.argsort(dim=1, descending=True, stable=True)
    offsets = torch.arange(scores.shape[1], device=scores.device).expand_as(order)
    rank = torch.empty_like(order).scatter_(1, order, offsets)
    chosen = candidates & (rank < count[:, None])
    if threshold is not None:
        chosen = chosen | (candidates & (scores >= threshold))
    return chosen
