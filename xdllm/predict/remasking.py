"""Remasking (Mask-Predict): a step may take back tokens it wrote earlier in the block.

Without remasking a committed token is final. With it, a step first commits as usual (the
scheduled count of the best new candidates, plus everything above the threshold), which fixes
how many masks the block keeps; then, among every generated position of the current block (the
tokens written at earlier steps, scored by the confidence they had when written, and this step's
candidates, scored now), it keeps the best-scoring ones and masks the rest again. The block ends
the step with exactly the masks the schedule leaves, so it still finishes by its deadline; an
earlier token is replaced only by a new one scoring higher (the earlier offset wins a tie).
This is the iterative refinement of Mask-Predict (Ghazvininejad et al., 2019) inside the
engine's blocks, schedules and thresholds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.predict.unmask_count import select_positions


@dataclass(frozen=True)
class Remasked:
    """One step's writes with remasking: the new window (earlier tokens taken back are masks
    again), the new tokens written (``committed``) and each position's score as written."""

    window: Integer[Tensor, "rows width"]
    committed: Bool[Tensor, "rows width"]
    written_scores: Float[Tensor, "rows width"]


def remask_lowest(window_ids: Integer[Tensor, "rows width"], tokens: Integer[Tensor, "rows width"],
                  scores: Float[Tensor, "rows width"], written_scores: Float[Tensor, "rows width"],
                  candidates: Bool[Tensor, "rows width"], committed: Bool[Tensor, "rows width"],
                  pool: Bool[Tensor, "rows width"], mask_token_id: int) -> Remasked:
    """Keep the best of the block's earlier tokens and this step's candidates.

    ``candidates``: the block's masked positions this step scored; ``committed``: those the step
    would commit without remasking (it sets how many masks stay); ``pool``: the block's generated
    positions (candidates and earlier writes); ``written_scores``: the score each earlier write
    had when it was made."""
    masks_left = candidates.sum(1) - committed.sum(1)
    ranked = torch.where(candidates, scores, written_scores)
    kept = select_positions(ranked, pool, pool.sum(1) - masks_left, None)
    new_tokens = kept & candidates
    taken_back = pool & ~kept & ~candidates
    window = torch.where(new_tokens, tokens, torch.where(taken_back, mask_token_id, window_ids))
    return Remasked(window=window, committed=new_tokens,
                    written_scores=torch.where(new_tokens, scores, written_scores))
