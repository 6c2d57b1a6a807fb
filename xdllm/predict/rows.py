"""The unmasking engine's per-row decoding state and its output windows.

A row's output region is addressed by offsets (``0 .. region_len - 1``); ``window_index`` maps
them to canvas columns, and when every row's region is the same column range (``shared_start``)
the window is a slice instead of a gather. :class:`RowState` is what the step loop carries per
row, :class:`StepOutcome` what one step produced for the rows that ran.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from jaxtyping import Float, Integer
from torch import Tensor, nn


def read_window(canvas_values: Tensor, window_index: Integer[Tensor, "rows region"],
                shared_start: int | None) -> Tensor:
    """``canvas_values[row, window_index[row, offset]]`` (a slice when regions coincide)."""
    if shared_start is not None:
        return canvas_values[:, shared_start:shared_start + window_index.shape[1]]
    if canvas_values.dim() == 3:
        window_index = window_index[..., None].expand(-1, -1, canvas_values.shape[-1])
    return canvas_values.gather(1, window_index)


def write_window(row_ids: Tensor, window_index: Tensor, window_valid: Tensor,
                 shared_start: int | None, old_window: Tensor, new_window: Tensor) -> Tensor:
    """``row_ids`` with the region replaced by ``new_window`` (a fresh tensor).

    In the gathered case offsets past a row's region end repeat a clamped column, so the update
    is added as a difference that is zero there, never written twice with different values.
    """
    if shared_start is not None:
        updated = row_ids.clone()
        updated[:, shared_start:shared_start + new_window.shape[1]] = new_window
        return updated
    change = torch.where(window_valid, new_window - old_window, 0)
    return row_ids.scatter_add(1, window_index, change)


@dataclass
class StepOutcome:
    """What one step produced for the rows that took part."""

    ids: Tensor
    block: Tensor
    block_entry: Tensor
    unfinished: Tensor
    probs: Tensor
    committed: Tensor
    scores: Tensor
    written_scores: Tensor


@dataclass
class RowState:
    """Per-row decoding state: the canvas, its fixed layout (``generated``: the region offsets
    that held a mask at the start, the only ones a step may write), the block bookkeeping
    (``block``: current block, -1 before the first step; ``block_entry``: the step it began) and
    the score each written token had when it was written (``written_scores``, for remasking)."""

    ids: Tensor
    attention_mask: Tensor
    positions: Tensor
    window_index: Tensor
    window_valid: Tensor
    generated: Tensor
    keys: Tensor
    n_blocks: Tensor
    block: Tensor
    block_entry: Tensor
    written_scores: Tensor

    def select(self, rows: Tensor) -> RowState:
        return RowState(**{f.name: getattr(self, f.name).index_select(0, rows)
                        for f in fields(self)})

    def updated(self, outcome: StepOutcome) -> RowState:
        return replace(self, ids=outcome.ids, block=outcome.block,
                       block_entry=outcome.block_entry, written_scores=outcome.written_scores)

    def updated_rows(self, rows: Tensor, outcome: StepOutcome) -> RowState:
        return replace(self, ids=self.ids.index_copy(0, rows, outcome.ids),
                       block=self.block.index_copy(0, rows, outcome.block),
                       block_entry=self.block_entry.index_copy(0, rows, outcome.block_entry),
                       written_scores=self.written_scores.index_copy(0, rows, outcome.written_scores))


def window_logits(model: nn.Module, rows: RowState, shared_start: int | None) -> Float[Tensor, "rows region vocab"]:
    """The logits of the rows' output windows. A model exposing ``final_hidden`` and
    ``lm_head_weight`` (the contract of the chunked losses, :mod:`xdllm.losses.chunked`) has only
    the window projected to the vocabulary; any other model's full-canvas logits are read at it."""
    inputs = {"attention_mask": rows.attention_mask, "positions": rows.positions}
    projects_window = hasattr(model, "final_hidden") and hasattr(model, "lm_head_weight")
    values = model.final_hidden(rows.ids, **inputs) if projects_window else model(rows.ids, **inputs)
    if values.dim() != 3 or values.shape[:2] != rows.ids.shape:
        what = "model.final_hidden returned shape" if projects_window else "model returned shape"
        raise ValueError(f"{what} {tuple(values.shape)}; expected [{rows.ids.shape[0]}, {rows.ids.shape[1]}, "
                         f"{'d_model' if projects_window else 'vocab'}]")
    window = read_window(values, rows.window_index, shared_start)
    return torch.nn.functional.linear(window, model.lm_head_weight) if projects_window else window
