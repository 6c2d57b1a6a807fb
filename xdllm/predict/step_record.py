"""What the unmasking engine hands a history recorder after each step (a ``DenoisingStep``)."""

from __future__ import annotations

import torch
from jaxtyping import Float, Integer
from torch import Tensor

from xdllm.interfaces import DenoisingStep
from xdllm.predict.rows import RowState, StepOutcome


def step_state(step: int, state: RowState, active: Integer[Tensor, " active"],
               outcome: StepOutcome, output_start: Integer[Tensor, " batch"], k: int
               ) -> DenoisingStep:
    """What a history recorder keeps of a step, on the output window, for the whole batch.

    One ``topk`` of the window distributions the step already has: the recorder gets ``k``
    tokens per position, never a vocabulary-sized tensor. Offsets outside a row's region and
    rows that did not run hold zeros. Nothing is read on the host. The canvas is handed over as
    is: the engine never writes ``ids`` in place, and recorders copy what they keep.
    """
    n_rows = state.ids.shape[0]
    every_row = active.numel() == n_rows  # then ``active`` is 0..n-1
    valid = state.window_valid if every_row else state.window_valid.index_select(0, active)
    top_probs, top_ids = top_k(outcome.probs, k)
    values = (torch.ones(active.shape, dtype=torch.bool, device=active.device),
              torch.where(valid[..., None], top_ids, 0),
              torch.where(valid[..., None], top_probs, 0.0),
              outcome.committed & valid,
              torch.where(valid, outcome.scores, 0.0))
    if not every_row:  # the rows that did not run get zeros
        values = tuple(v.new_zeros((n_rows, *v.shape[1:])).index_copy(0, active, v)
                       for v in values)
    ran, top_ids, top_probs, committed, confidence = values
    return DenoisingStep(step=step, canvas=state.ids, output_start=output_start,
                         window_valid=state.window_valid, topk_ids=top_ids, topk_probs=top_probs,
                         committed=committed, confidence=confidence, active=ran)


def top_k(probs: Float[Tensor, "rows region vocab"], k: int
           ) -> tuple[Float[Tensor, "rows region k"], Integer[Tensor, "rows region k"]]:
    """The ``k`` most probable tokens of every window position, best first."""
    vocab = probs.shape[-1]
    if not 1 <= k <= vocab:
        raise ValueError(f"history recorder asks for the top k={k} tokens per position; "
                         f"k must be in 1..{vocab} (the vocabulary size)")
    top = probs.topk(k, dim=-1)
    return top.values, top.indices
