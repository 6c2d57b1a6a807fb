"""Prompt dropout, for classifier-free guidance: some training rows show a null prompt.

A dropped row's prompt tokens (after bos) become the pad token, still attended and at their
positions, so the row teaches the model to answer without its condition: the unconditional
distribution a guided predictor mixes in (``guidance`` in :mod:`xdllm.predict.guidance`), which
shows the same null prompt. The answer is corrupted and supervised as in any other row; pad is
never the mask token, so no loss ever falls on the null prompt.

Which rows are dropped depends only on ``(seed, step, sample_index)``, like the corruption (a
stream of its own), so it survives resume and does not depend on the batch a sample is in.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Bool, Integer
from torch import Tensor

from xdllm.diffusion.seeding import sample_seed
from xdllm.interfaces import Example

STREAM = 0x43464721
"""Mixed into the run seed so the dropout draws are not the corruption's."""


def check_prompt_dropout(rate: float, where: str) -> None:
    """A probability below 1 (every prompt dropped would teach no conditional model)."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"{where}: prompt_dropout must be in [0, 1), got {rate}")


def dropped_prompts(examples: Sequence[Example], seed: int, rate: float) -> Bool[Tensor, " batch"]:
    """Which rows drop their prompt, each with probability ``rate`` (a uniform draw per sample:
    its 63-bit mixed seed over 2**63)."""
    draws = [sample_seed(seed ^ STREAM, int(sample["step"]), int(sample["sample_index"])) / 2.0**63
             for sample in examples]
    return torch.tensor(draws, dtype=torch.float64) < rate


def null_prompts(input_ids: Integer[Tensor, "batch width"], prompt_columns: Bool[Tensor, "batch width"],
                 dropped: Bool[Tensor, " batch"], pad_token_id: int) -> Integer[Tensor, "batch width"]:
    """``input_ids`` with the prompt columns of the dropped rows set to the pad token."""
    return input_ids.masked_fill(prompt_columns & dropped[:, None], pad_token_id)
