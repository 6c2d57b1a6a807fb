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

With an entropy budget ``g`` (the EB-sampler of Ben-Hamu et al., 2025) the floor is raised to
the largest prefix of the confidence ranking whose entropies sum, less the largest of them, to at
most ``g`` nats: tokens drawn in one step are drawn independently, and the summed entropy bounds
what that independence can cost. ``g = 0`` adds only certain positions (entropy 0) beyond the
first; a large ``g`` commits everything at once.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.diffusion.schedules import NoiseSchedule
from xdllm.predict.confidence import entropy

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


def check_entropy_budget(entropy_budget: float | None) -> None:
    """An entropy budget is a number of nats >= 0 (or None: no budget)."""
    if entropy_budget is not None and not entropy_budget >= 0.0:
        raise ValueError(f"entropy_budget must be >= 0 (nats) or null, got {entropy_budget}")


def entropy_budget_count(entropies: Float[Tensor, "batch region"], order: Integer[Tensor, "batch region"],
                         candidates: Bool[Tensor, "batch region"], budget: float) -> Integer[Tensor, " batch"]:
    """How many of the best-ranked candidates (``order``: candidates first, best first) fit the
    entropy budget: the longest prefix whose entropies sum, less their maximum, to ``<= budget``
    (at least one where a row has a candidate). The excess never falls along the ranking, so the
    positions within budget are a prefix."""
    ranked_entropy = torch.where(candidates, entropies, 0.0).gather(1, order)
    excess = ranked_entropy.cumsum(1) - ranked_entropy.cummax(1).values
    return torch.minimum((excess <= budget).sum(1), candidates.sum(1))


def select_positions(scores: Float[Tensor, "batch region"],
                     candidates: Bool[Tensor, "batch region"],
                     count: Integer[Tensor, " batch"],
                     threshold: float | None,
                     probs: Float[Tensor, "batch region vocab"] | None = None,
                     entropy_budget: float | None = None) -> Bool[Tensor, "batch region"]:
    """The ``count`` best-scoring candidates per row (earlier offset wins ties), plus every
    candidate scoring ``>= threshold`` when one is given, and with ``entropy_budget`` (and each
    position's final distribution, ``probs``) at least the best-ranked ones within that budget."""
    ranked = torch.where(candidates, scores, float("-inf"))
    order = ranked.argsort(dim=1, descending=True, stable=True)
    offsets = torch.arange(scores.shape[1], device=scores.device).expand_as(order)
    rank = torch.empty_like(order).scatter_(1, order, offsets)
    if entropy_budget is not None:
        count = torch.maximum(count, entropy_budget_count(entropy(probs), order, candidates, entropy_budget))
    chosen = candidates & (rank < count[:, None])
    if threshold is not None:
        chosen = chosen | (candidates & (scores >= threshold))
    return chosen
