"""What the block-wise predictors (hybrid, udlm) share: the forward passes each row took, and
the history state of one step over one block."""

from __future__ import annotations

import time

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.interfaces import DenoisingStep
from xdllm.predict.canvas import Canvas
from xdllm.predict.step_record import top_k


class PassTally:
    """Forward passes per row (while it ran), and the time at each row's last one."""

    def __init__(self, n_rows: int, device: torch.device, start_time: float) -> None:
        self.steps = 0
        self.steps_taken = torch.zeros(n_rows, dtype=torch.long, device=device)
        self.last_step = torch.zeros(n_rows, dtype=torch.long, device=device)
        self.elapsed: list[float] = []
        self.start_time = start_time

    def count(self, active: Bool[Tensor, " batch"]) -> None:
        """One pass done; ``active`` rows took part in it."""
        self.steps_taken = self.steps_taken + active.long()
        self.last_step = torch.where(active, self.steps, self.last_step)
        self.elapsed.append(time.perf_counter() - self.start_time)
        self.steps += 1

    def time_taken(self) -> list[float]:
        return [self.elapsed[step] for step in self.last_step.tolist()]


def block_step_state(step: int, ids: Integer[Tensor, "batch seq_len"], canvas: Canvas, block_start: int,
                probs: Float[Tensor, "batch width vocab"], committed: Bool[Tensor, "batch block"],
                scores: Float[Tensor, "batch block"], active: Bool[Tensor, " batch"], k: int) -> DenoisingStep:
    """What a history recorder keeps of one step: the top-k of the ``width`` distributions the
    step computed (from the block's first offset), the block's commits and scores; zeros (False)
    at every other offset and in the rows that did not run. No host transfer."""
    n_rows, region = canvas.window_valid.shape
    width, size = probs.shape[1], committed.shape[1]
    top_probs, top_ids = top_k(probs, k)
    ran = active[:, None, None]
    topk_ids = torch.zeros((n_rows, region, k), dtype=torch.long, device=ids.device)
    topk_probs = torch.zeros((n_rows, region, k), dtype=probs.dtype, device=ids.device)
    topk_ids[:, block_start:block_start + width] = torch.where(ran, top_ids, 0)
    topk_probs[:, block_start:block_start + width] = torch.where(ran, top_probs, 0.0)
    here = torch.zeros((n_rows, region), dtype=torch.bool, device=ids.device)
    here[:, block_start:block_start + size] = committed & active[:, None]
    confidence = torch.zeros((n_rows, region), dtype=scores.dtype, device=ids.device)
    confidence[:, block_start:block_start + size] = torch.where(active[:, None], scores, 0.0)
    return DenoisingStep(step=step, canvas=ids, output_start=canvas.output_start, window_valid=canvas.window_valid,
                         topk_ids=topk_ids, topk_probs=topk_probs, committed=here, confidence=confidence,
                         active=active)
