"""Classifier-free guidance for the unmasking predictor (``guidance=w``).

Every step runs the model twice, in one batch: on the canvas (conditional) and on the same
canvas with a null prompt (unconditional): every token the row conditions on, the prompt and an
infilling prompt's given tokens, but not the leading bos and not what the predictor has written,
becomes the pad token, still attended and at its position, as prompt dropout showed it in
training (:mod:`xdllm.collate.prompt_dropout`). The step then samples and scores from

    logits = uncond + (1 + w) * (cond - uncond)

(w = 0: the conditional model alone; larger w pushes the answer towards what the prompt makes
likely beyond what any answer is; Ho & Salimans, 2022, and for masked diffusion LLaDA, Nie et al.,
2025, and Schiff et al., 2025). The unconditional distribution means something only for a model
trained with ``prompt_dropout``; for any other the pad-filled prompt is input it never saw.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor


def check_guidance(guidance: float) -> None:
    if not guidance >= 0.0:
        raise ValueError(f"guidance must be >= 0 (0: no guidance), got {guidance}")


def condition_columns(attention_mask: Bool[Tensor, "batch seq_len"], window_index: Integer[Tensor, "batch region"],
                      generated: Bool[Tensor, "batch region"]) -> Bool[Tensor, "batch seq_len"]:
    """The columns a row conditions on: its real tokens, except the first (bos) and the ones the
    predictor generates."""
    seq_len = attention_mask.shape[1]
    # summed, not scattered: offsets past a row's region are clamped onto its last column
    to_generate = torch.zeros(attention_mask.shape, dtype=torch.long, device=attention_mask.device).scatter_add(
        1, window_index, generated.long()) > 0
    first_real = torch.where(attention_mask.any(1), attention_mask.int().argmax(1), seq_len)
    after_first = torch.arange(seq_len, device=attention_mask.device)[None, :] > first_real[:, None]
    return attention_mask & ~to_generate & after_first


def null_prompt(ids: Integer[Tensor, "batch seq_len"], condition: Bool[Tensor, "batch seq_len"],
                pad_token_id: int) -> Integer[Tensor, "batch seq_len"]:
    """The canvas the unconditional pass sees: the condition's columns hold the pad token."""
    return ids.masked_fill(condition, pad_token_id)


def guided_logits(conditional: Float[Tensor, "rows region vocab"], unconditional: Float[Tensor, "rows region vocab"],
                  guidance: float) -> Float[Tensor, "rows region vocab"]:
    """``uncond + (1 + w) (cond - uncond)``, in float32."""
    conditional, unconditional = conditional.float(), unconditional.float()
    return unconditional + (1.0 + guidance) * (conditional - unconditional)
