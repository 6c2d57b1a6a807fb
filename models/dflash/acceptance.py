"""Which drafts a verification keeps, and the target's token after them.

``probs[:, i]`` is the target's distribution after the ``i``-th verified token (the anchor is the
0-th, the drafts ``d_1 .. d_n`` follow), so ``probs[:, i - 1]`` scores ``d_i`` and
``probs[:, n]`` is the distribution after the last draft. Both rules return the round's tokens,
``n + 1`` per row (the accepted drafts, then the target's token at the first rejected offset, the
rest unused), and how many drafts each row accepts.

- :func:`greedy_acceptance`: the longest prefix with ``d_i == argmax probs[:, i - 1]``, then the
  target's argmax.
- :func:`speculative_sampling` (Leviathan et al. 2023, Chen et al. 2023): with ``d_i ~ q_i``
  (``draft_probs``), ``d_i`` is accepted with probability ``min(1, p_i(d_i) / q_i(d_i))``, in
  order up to the first rejection; the target's token is drawn at the first rejected offset from
  ``max(0, p_i - q_i)`` (renormalised; ``p_i`` itself when that is zero everywhere, which happens
  only when ``p_i == q_i``), or from ``p`` after the last draft when all are accepted. Each token is
  then distributed as the target's own sample given the tokens before it.

Uniforms come from the caller (one per draft to accept, one per offset for the target's token),
so the choice is a pure function of them: vectorised over rows and offsets, no host sync.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Integer
from torch import Tensor

from xdllm.predict.sampling import choose_tokens


def greedy_acceptance(drafts: Integer[Tensor, "batch drafted"], probs: Float[Tensor, "batch verified vocab"]
                      ) -> tuple[Integer[Tensor, "batch verified"], Integer[Tensor, " batch"]]:
    """The target's argmax after every verified token, and the drafts that agree with it."""
    choice = choose_tokens(probs, None)
    return choice, (drafts == choice[:, :-1]).long().cumprod(dim=1).sum(dim=1)


def speculative_sampling(drafts: Integer[Tensor, "batch drafted"], draft_probs: Float[Tensor, "batch drafted vocab"],
                         probs: Float[Tensor, "batch verified vocab"], accept_draws: Float[Tensor, "batch drafted"],
                         token_draws: Float[Tensor, "batch verified"]
                         ) -> tuple[Integer[Tensor, "batch verified"], Integer[Tensor, " batch"]]:
    """The rejection scheme of the module docstring; ``drafts`` must have been drawn from
    ``draft_probs`` (so ``q_i(d_i) > 0``)."""
    target_of_draft = probs[:, :-1].gather(2, drafts[..., None])[..., 0]
    draft_of_draft = draft_probs.gather(2, drafts[..., None])[..., 0]
    kept = accept_draws * draft_of_draft < target_of_draft  # u < p / q, u uniform in [0, 1)
    accepted = kept.long().cumprod(dim=1).sum(dim=1)
    residual = (probs[:, :-1] - draft_probs).clamp_min(0.0)
    residual = torch.where(residual.sum(dim=-1, keepdim=True) > 0, residual, probs[:, :-1])
    choice = choose_tokens(torch.cat([residual, probs[:, -1:]], dim=1), token_draws)
    offsets = torch.arange(choice.shape[1], device=choice.device)
    drafted = torch.cat([drafts, choice[:, -1:]], dim=1)
    return torch.where(offsets < accepted[:, None], drafted, choice), accepted
