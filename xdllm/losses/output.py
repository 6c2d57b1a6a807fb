"""The one return type every dLLM loss shares, so a training step never branches on the loss."""

from __future__ import annotations

from typing import NamedTuple, Optional

from torch import Tensor


class DLLMLossOutput(NamedTuple):
    """What a dLLM loss returns.

    ``total_loss`` is back-propagated. ``dllm_loss`` is the detached diffusion part, for logging.
    ``draft_correct_per_pos`` / ``draft_count_per_pos`` (DFlash only, shape ``[block_size - 1]``)
    count argmax hits and valid positions per in-block offset, summed over batch and blocks, so
    they can be all-reduced and divided into a per-offset draft acceptance rate.
    """

    total_loss: Tensor
    dllm_loss: Tensor
    draft_correct_per_pos: Optional[Tensor] = None
    draft_count_per_pos: Optional[Tensor] = None
