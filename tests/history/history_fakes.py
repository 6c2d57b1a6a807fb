"""A small fake unmasking engine that drives a history recorder exactly like the predictor.

It commits a fixed number of positions per row and step (so rows finish at different steps),
gives rows different output starts (so output windows differ in length), hands the recorder the
top-``recorder.k`` of each window position, and updates its canvas in place between steps (so a
recorder that kept references instead of copies would record the final canvas every step).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from xdllm.interfaces import DenoisingStep, HistoryRecorder, PredictionDict

MASK_ID = 1
PAD_ID = 0


@dataclass
class FakeRun:
    """What the engine did: ``steps`` as handed to the recorder (canvases snapshotted) and, for
    checking them, each step's canvas-wide distributions ``probs`` (never handed over)."""

    batch: dict
    initial_canvas: torch.Tensor
    output_start: torch.Tensor
    steps: list[DenoisingStep]
    probs: list[torch.Tensor]
    prediction: PredictionDict


def window_of(values: torch.Tensor, window_index: torch.Tensor,
              keep: torch.Tensor) -> torch.Tensor:
    """Canvas-wide ``[rows, canvas_len, ...]`` values at the window's columns, zero where not
    ``keep`` (outside a row's region, or a row that did not run)."""
    if values.dim() == 3:
        window_index = window_index[..., None].expand(-1, -1, values.shape[-1])
        keep = keep[..., None]
    return values.gather(1, window_index).masked_fill(~keep, 0)


def fake_generate(
    recorder: HistoryRecorder | None,
    prompt_lens: list[int],
    gen_len: int,
    commits_per_step: list[int],
    vocab_size: int = 12,
    seed: int = 0,
    sample_index: list[int] | None = None,
    k: int = 3,
    max_steps: int | None = None,
) -> FakeRun:
    """Run the fake engine; the top-k it hands over uses ``recorder.k`` (``k`` without one).
    ``max_steps`` stops it early, leaving positions masked (never generated)."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(prompt_lens)
    canvas_len = max(prompt_lens) + gen_len
    output_start = torch.tensor(prompt_lens)
    position = torch.arange(canvas_len)
    prompt = torch.randint(4, vocab_size, (rows, canvas_len), generator=generator)
    canvas = torch.where(position < output_start[:, None], prompt, MASK_ID)
    prompt_width = max(prompt_lens)
    batch = {
        "input_ids": torch.where(position[:prompt_width] < output_start[:, None],
                                 prompt[:, :prompt_width], PAD_ID),
        "attention_mask": position[:prompt_width] < output_start[:, None],
        "target_ids": torch.randint(4, vocab_size, (rows, gen_len), generator=generator),
    }
    if sample_index is not None:
        batch["sample_index"] = torch.tensor(sample_index)
    initial = canvas.clone()
    offsets = torch.arange(canvas_len - min(prompt_lens))
    window_index = (output_start[:, None] + offsets).clamp(max=canvas_len - 1)
    window_valid = offsets < (canvas_len - output_start)[:, None]
    if recorder is not None:
        k = recorder.k
        recorder.begin(batch, canvas, output_start)
    per_row = torch.tensor(commits_per_step)[:, None]
    steps: list[DenoisingStep] = []
    step_probs: list[torch.Tensor] = []
    step = 0
    while bool((canvas == MASK_ID).any()) and (max_steps is None or step < max_steps):
        masked = canvas == MASK_ID
        active = masked.any(dim=1)
        logits = 3 * torch.randn(rows, canvas_len, vocab_size, generator=generator)
        logits[..., MASK_ID] = float("-inf")
        probs = logits.softmax(dim=-1)
        confidence, token = probs.max(dim=-1)
        score = torch.where(masked, confidence, float("-inf"))
        rank = score.argsort(dim=1, descending=True).argsort(dim=1)
        committed = masked & (rank < per_row)
        canvas[committed] = token[committed]  # in place, as an engine may do
        keep = window_valid & active[:, None]
        top = window_of(probs, window_index, keep).topk(k, dim=-1)
        state = DenoisingStep(
            step=step, canvas=canvas, output_start=output_start, window_valid=window_valid,
            topk_ids=top.indices.masked_fill(~keep[..., None], 0), topk_probs=top.values,
            committed=window_of(committed, window_index, keep),
            confidence=window_of(torch.where(committed, confidence, 0.0), window_index, keep),
            active=active,
        )
        if recorder is not None:
            recorder.on_step(state)
        steps.append(replace(state, canvas=canvas.clone()))
        step_probs.append(probs)
        step += 1
    active_steps = (torch.stack([s.active for s in steps]).sum(0) if steps
                    else torch.zeros(rows, dtype=torch.long))
    prediction = PredictionDict(
        loss=None, text=[f"row {b}" for b in range(rows)], ids=canvas.clone(),
        time_taken=[0.0] * rows, output_start_idx=output_start, steps_taken=active_steps.tolist(),
    )
    if recorder is not None:
        recorder.end(prediction)
    return FakeRun(batch, initial, output_start, steps, step_probs, prediction)
