"""The canvas a predictor denoises, built from a prediction batch.

Two ways to ask for text:

- **continuation** (also unconditional, with an empty or bos-only prompt): ``max_new_tokens``
  mask tokens go right after each row's last real token. Left-padded prompts therefore get the
  masks at the end of the canvas, right-padded ones inside the old padding; either way a row's
  real tokens form one contiguous run and its RoPE positions count real tokens only, so the
  padding layout does not change what the model sees.
- **infilling**: the prompt already holds mask tokens; the output region of a row runs from its
  first to its last mask (inclusive), and the real tokens in between stay fixed.

Every position of a row is addressed by its *offset* inside the output region
(``0 .. region_len - 1``); the window tensors map offsets to canvas columns so the engine can
work on ``[batch, region]`` slices instead of the whole canvas. When every row's region is the
same column range (left-padded continuation, the common case) ``window_start`` says where, and
the engine slices instead of gathering.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Integer
from torch import Tensor

from xdllm.nn.transformer import default_positions


@dataclass
class Canvas:
    """A batch of rows to denoise, plus where each row's output region lies."""

    ids: Integer[Tensor, "batch seq_len"]
    attention_mask: Bool[Tensor, "batch seq_len"]
    positions: Integer[Tensor, "batch seq_len"]
    output_start: Integer[Tensor, " batch"]
    region_len: Integer[Tensor, " batch"]
    window_index: Integer[Tensor, "batch region"]
    window_valid: Bool[Tensor, "batch region"]

    @property
    def window_start(self) -> int | None:
        """The shared first column of every row's region, or None if rows differ."""
        width = self.window_index.shape[1]
        if width == 0 or not bool(self.window_valid.all()):
            return None
        first = self.output_start[0]
        return int(first) if bool((self.output_start == first).all()) else None


def _check_prompt(input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Validate shapes and dtypes and return the attention mask as bool."""
    if input_ids.dim() != 2:
        raise ValueError(f"batch['input_ids'] must be [batch, seq_len], got shape "
                         f"{tuple(input_ids.shape)}")
    if torch.is_floating_point(input_ids):
        raise TypeError(f"batch['input_ids'] must hold integer ids, got dtype {input_ids.dtype}")
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"batch['attention_mask'] has shape {tuple(attention_mask.shape)}, "
                         f"expected {tuple(input_ids.shape)} like batch['input_ids']")
    return attention_mask.to(torch.bool)


def _real_run(attention_mask: Tensor) -> tuple[Tensor, Tensor]:
    """First real column and number of real tokens per row; real tokens must be contiguous."""
    seq_len = attention_mask.shape[1]
    cols = torch.arange(seq_len, device=attention_mask.device)
    n_real = attention_mask.sum(1)
    first = torch.where(n_real > 0, attention_mask.int().argmax(1), 0)
    inside = (cols >= first[:, None]) & (cols < (first + n_real)[:, None])
    broken = (attention_mask != inside).any(1)
    if bool(broken.any()):
        rows = broken.nonzero().flatten().tolist()
        raise ValueError(f"batch['attention_mask'] rows {rows} are not one contiguous run of "
                         "real tokens (only left or right padding is supported)")
    return first, n_real


def _window(output_start: Tensor, region_len: Tensor, seq_len: int) -> tuple[Tensor, Tensor]:
    width = int(region_len.max()) if region_len.numel() else 0
    offsets = torch.arange(width, device=output_start.device)
    index = (output_start[:, None] + offsets).clamp(max=max(seq_len - 1, 0))
    return index, offsets < region_len[:, None]


def continuation_canvas(input_ids: Integer[Tensor, "batch prompt_len"],
                        attention_mask: Bool[Tensor, "batch prompt_len"] | Integer[Tensor, "batch prompt_len"],
                        max_new_tokens: int, pad_token_id: int, mask_token_id: int) -> Canvas:
    """Append ``max_new_tokens`` masks after each row's last real token."""
    attention_mask = _check_prompt(input_ids, attention_mask)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1 for continuation, got {max_new_tokens}")
    prompt_masks = (input_ids == mask_token_id) & attention_mask
    if bool(prompt_masks.any()):
        rows = prompt_masks.any(1).nonzero().flatten().tolist()
        raise ValueError(f"prompt rows {rows} contain mask tokens; pass batch['infill']=True "
                         "(and no max_new_tokens) to fill them instead of continuing")
    first, n_real = _real_run(attention_mask)
    batch, prompt_len = input_ids.shape
    seq_len = prompt_len + max_new_tokens
    device = input_ids.device
    ids = torch.full((batch, seq_len), pad_token_id, dtype=torch.long, device=device)
    ids[:, :prompt_len] = torch.where(attention_mask, input_ids.long(), pad_token_id)
    real = torch.zeros((batch, seq_len), dtype=torch.bool, device=device)
    real[:, :prompt_len] = attention_mask
    output_start = first + n_real
    new_cols = output_start[:, None] + torch.arange(max_new_tokens, device=device)
    ids.scatter_(1, new_cols, mask_token_id)
    real.scatter_(1, new_cols, True)
    region_len = torch.full_like(output_start, max_new_tokens)
    window_index, window_valid = _window(output_start, region_len, seq_len)
    positions = default_positions(seq_len, real, None, device)
    return Canvas(ids, real, positions, output_start, region_len, window_index, window_valid)


def infill_canvas(input_ids: Integer[Tensor, "batch seq_len"],
                  attention_mask: Bool[Tensor, "batch seq_len"] | Integer[Tensor, "batch seq_len"],
                  pad_token_id: int, mask_token_id: int) -> Canvas:
    """Fill the mask tokens already in the rows; the region spans first to last mask."""
    attention_mask = _check_prompt(input_ids, attention_mask)
    first, n_real = _real_run(attention_mask)
    ids = torch.where(attention_mask, input_ids.long(), pad_token_id)
    seq_len = ids.shape[1]
    cols = torch.arange(seq_len, device=ids.device)
    masked = ids == mask_token_id
    has_mask = masked.any(1)
    first_mask = torch.where(masked, cols, seq_len).min(1).values
    last_mask = torch.where(masked, cols, -1).max(1).values
    output_start = torch.where(has_mask, first_mask, first + n_real)
    region_len = torch.where(has_mask, last_mask - first_mask + 1, 0)
    window_index, window_valid = _window(output_start, region_len, seq_len)
    positions = default_positions(seq_len, attention_mask, None, attention_mask.device)
    return Canvas(ids, attention_mask, positions, output_start, region_len, window_index, window_valid)
