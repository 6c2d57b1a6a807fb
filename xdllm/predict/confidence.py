"""Confidence of the token a position would commit, used to rank positions for unmasking.

All scores are computed on the final distribution ``p`` (after temperature, top-k and top-p)
for the token actually chosen, so they agree with what is written:

- ``top_prob``: ``p(token)``, in ``[0, 1]``;
- ``prob_diff``: ``p(token) - max_{v != token} p(v)``, in ``[-1, 1]`` (the p1 - p2 margin when
  the token is the argmax; negative when sampling picked a runner-up);
- ``entropy``: ``-H(p)`` in nats, in ``[-ln V, 0]`` (0 = one-hot). It does not depend on the token.

A threshold is compared with ``>=`` to the same score, so its valid range is the score's range;
in particular an entropy threshold is a negative number: ``threshold = -0.5`` commits every
position whose distribution has entropy at most 0.5 nats.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from jaxtyping import Float, Integer
from torch import Tensor

ConfidenceMode = Literal["top_prob", "prob_diff", "entropy"]
CONFIDENCE_MODES: tuple[str, ...] = get_args(ConfidenceMode)

_THRESHOLD_RANGES = {"top_prob": (0.0, 1.0), "prob_diff": (-1.0, 1.0),
                     "entropy": (float("-inf"), 0.0)}


def check_confidence_options(mode: str | None, threshold: float | None) -> None:
    """Reject an unknown mode, or a threshold outside the range its score can take."""
    if mode is not None and mode not in CONFIDENCE_MODES:
        raise ValueError(f"confidence must be one of {CONFIDENCE_MODES} or None, got {mode!r}")
    if threshold is None:
        return
    if mode is None:
        raise ValueError("threshold needs a confidence mode: with confidence=None positions are "
                         "unmasked in random order and have no score to compare")
    low, high = _THRESHOLD_RANGES[mode]
    if not low <= threshold <= high:
        raise ValueError(f"threshold {threshold} is outside [{low}, {high}], the range of the "
                         f"{mode!r} score (entropy scores are -H in nats, so <= 0)")


def entropy(probs: Float[Tensor, "*lead vocab"]) -> Float[Tensor, "*lead"]:
    """``H(p)`` in nats of each distribution (``0 log 0 = 0``)."""
    # clamping before the log is much faster than special.entr
    return -(probs * probs.clamp_min(torch.finfo(probs.dtype).tiny).log()).sum(-1)


def token_confidence(mode: ConfidenceMode, probs: Float[Tensor, "*lead vocab"],
                     tokens: Integer[Tensor, "*lead"]) -> Float[Tensor, "*lead"]:
    """The ``mode`` score of committing ``tokens`` under ``probs``."""
    if mode == "entropy":
        return -entropy(probs)
    chosen = probs.gather(-1, tokens[..., None]).squeeze(-1)
    if mode == "top_prob":
        return chosen
    if mode != "prob_diff":
        raise ValueError(f"confidence must be one of {CONFIDENCE_MODES}, got {mode!r}")
    best_other = probs.scatter(-1, tokens[..., None], -1.0).amax(-1)
    return chosen - best_other
