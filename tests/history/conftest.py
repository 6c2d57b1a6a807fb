"""A small fake unmasking engine that drives a history recorder exactly like the predictor.

It commits a fixed number of positions per row and step (so rows finish at different steps),
gives rows different output starts, and updates its canvas in place between steps (so a
recorder that kept references instead of copies would record the final canvas every step).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
import torch

from xdllm.interfaces import DenoisingStep, HistoryRecorder, PredictionDict

MASK_ID = 1
PAD_ID = 0


@dataclass
class FakeRun:
    batch: dict
    initial_canvas: torch.Tensor
    output_start: torch.Tensor
    steps: list[DenoisingStep]
    prediction: PredictionDict


def fake_generate(
    recorder: HistoryRecorder | None,
    prompt_lens: list[int],
    gen_len: int,
    commits_per_step: list[int],
    vocab_size: int = 12,
    seed: int = 0,
    sample_index: list[int] | None = None,
) -> FakeRun:
    """Run the fake engine; return what it handed to the recorder (canvases snapshotted)."""
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
    if recorder is not None:
        recorder.begin(batch, canvas, output_start)
    per_row = torch.tensor(commits_per_step)[:, None]
    steps: list[DenoisingStep] = []
    step = 0
    while bool((canvas == MASK_ID).any()):
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
        state = DenoisingStep(
            step=step, canvas=canvas, probs=probs, committed=committed,
            confidence=torch.where(committed, confidence, 0.0), active=active,
            output_start=output_start,
        )
        if recorder is not None:
            recorder.on_step(state)
        steps.append(replace(state, canvas=canvas.clone()))
        step += 1
    active_steps = (torch.stack([s.active for s in steps]).sum(0) if steps
                    else torch.zeros(rows, dtype=torch.long))
    prediction = PredictionDict(
        loss=None, text=[f"row {b}" for b in range(rows)], ids=canvas.clone(),
        time_taken=[0.0] * rows, output_start_idx=output_start, steps_taken=active_steps.tolist(),
    )
    if recorder is not None:
        recorder.end(prediction)
    return FakeRun(batch, initial, output_start, steps, prediction)


@pytest.fixture
def generate():
    return fake_generate
