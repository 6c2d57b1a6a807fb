"""Exact match and token accuracy of predicted output regions against reference targets.

Definitions (per row ``b``):

- the *reference* is ``target_ids[b]`` up to and including its first EOS; if it has no EOS, its
  tokens before the first pad (all of it if there is no pad). Its length is ``n_b``.
- the *prediction* is ``ids[b, output_start[b] + i]`` for ``i < n_b``; offsets that fall past the
  end of the canvas count as wrong.
- ``correct_b`` = number of ``i < n_b`` where prediction and reference agree;
  ``exact_b`` = ``correct_b == n_b`` (what the prediction holds after the reference's EOS is
  ignored, matching the text, which is cut at the first EOS). A row with ``n_b = 0`` is an exact
  match with 0 tokens.
- token accuracy = ``sum_b correct_b / sum_b n_b`` (micro average over tokens), exact match =
  mean of ``exact_b``. Keep the per-row counts to aggregate over batches and devices.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Integer
from torch import Tensor


@dataclass(frozen=True)
class RegionMatch:
    """Per-row comparison of predicted output regions with their references."""

    correct: Integer[Tensor, " batch"]
    length: Integer[Tensor, " batch"]
    exact: Bool[Tensor, " batch"]

    @property
    def token_accuracy(self) -> float:
        return float(self.correct.sum()) / max(int(self.length.sum()), 1)

    @property
    def exact_match(self) -> float:
        return int(self.exact.sum()) / max(self.exact.numel(), 1)


def reference_lengths(target_ids: Integer[Tensor, "batch target_len"], eos_token_id: int,
                      pad_token_id: int) -> Integer[Tensor, " batch"]:
    """Length of each reference: through the first EOS, else up to the first pad."""
    width = target_ids.shape[1]
    cols = torch.arange(width, device=target_ids.device)
    first_eos = torch.where(target_ids == eos_token_id, cols, width).min(1).values
    first_pad = torch.where(target_ids == pad_token_id, cols, width).min(1).values
    return torch.where(first_eos < width, first_eos + 1, first_pad)


def match_output_regions(ids: Integer[Tensor, "batch seq_len"],
                         output_start: Integer[Tensor, " batch"],
                         target_ids: Integer[Tensor, "batch target_len"], eos_token_id: int,
                         pad_token_id: int) -> RegionMatch:
    """Compare each row's output region with its reference (definitions in the module doc)."""
    if ids.shape[0] != target_ids.shape[0] or output_start.shape[0] != ids.shape[0]:
        raise ValueError(f"batch sizes differ: ids {tuple(ids.shape)}, output_start "
                         f"{tuple(output_start.shape)}, target_ids {tuple(target_ids.shape)}")
    target_ids = target_ids.to(ids.device)
    length = reference_lengths(target_ids, eos_token_id, pad_token_id)
    seq_len, width = ids.shape[1], target_ids.shape[1]
    cols = output_start.to(ids.device)[:, None] + torch.arange(width, device=ids.device)
    inside = cols < seq_len
    predicted = ids.gather(1, cols.clamp(max=seq_len - 1))
    scored = torch.arange(width, device=ids.device)[None, :] < length[:, None]
    hits = (predicted == target_ids) & inside & scored
    correct = hits.sum(1)
    return RegionMatch(correct=correct, length=length, exact=correct == length)
