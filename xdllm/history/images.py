"""Step x position pictures of a sample's denoising, as ``[3, H, W]`` uint8 RGB tensors.

Rows are the sample's steps (top = first), columns its output positions (left = first); each
cell is ``cell_size`` pixels square so that short runs stay visible.
"""

from __future__ import annotations

import torch
from jaxtyping import UInt8
from torch import Tensor

from xdllm.history.reader import SampleHistory

MASKED_RGB = (24, 24, 24)
UNMASKED_RGB = (110, 110, 110)
COMMITTED_RGB = (80, 220, 120)
LOW_CONFIDENCE_RGB = (40, 60, 200)
HIGH_CONFIDENCE_RGB = (250, 220, 40)
MAX_IMAGE_SIDE = 1024
MAX_CELL_SIZE = 16


def cell_size(steps: int, positions: int) -> int:
    """Pixels per cell: as large as possible up to 16, keeping each side within 1024 pixels."""
    return max(1, min(MAX_CELL_SIZE, MAX_IMAGE_SIDE // max(steps, positions, 1)))


def commit_image(sample: SampleHistory) -> UInt8[Tensor, "3 height width"]:
    """When each position was committed: green at its commit step, grey once unmasked, dark
    while masked."""
    image = _base_grid(sample)
    image[sample.committed] = torch.tensor(COMMITTED_RGB, dtype=torch.uint8)
    return _to_pixels(image, sample)


def confidence_image(sample: SampleHistory) -> UInt8[Tensor, "3 height width"]:
    """Confidence at commit time, on a blue (lowest in this sample) to yellow (highest) ramp,
    drawn in the commit cell; other cells as in :func:`commit_image` without the green."""
    image = _base_grid(sample)
    is_last_commit = sample.committed & (
        sample.commit_step.unsqueeze(0) == sample.steps.unsqueeze(1)
    )
    confidence = sample.confidence_at_commit.unsqueeze(0).expand_as(is_last_commit)
    values = confidence[is_last_commit]
    finite = values[values.isfinite()]
    if finite.numel():
        low, high = finite.min(), finite.max()
        spread = high - low if high > low else torch.ones_like(high)
        scaled = ((values - low) / spread).nan_to_num(0.0).clamp(0.0, 1.0)
        low_rgb = torch.tensor(LOW_CONFIDENCE_RGB, dtype=torch.float32)
        high_rgb = torch.tensor(HIGH_CONFIDENCE_RGB, dtype=torch.float32)
        colours = low_rgb + scaled.unsqueeze(1) * (high_rgb - low_rgb)
        image[is_last_commit] = colours.round().to(torch.uint8)
    return _to_pixels(image, sample)


def _base_grid(sample: SampleHistory) -> UInt8[Tensor, "steps region 3"]:
    steps, positions = sample.canvas.shape
    image = torch.empty((steps, positions, 3), dtype=torch.uint8)
    image[:] = torch.tensor(UNMASKED_RGB, dtype=torch.uint8)
    image[sample.masked] = torch.tensor(MASKED_RGB, dtype=torch.uint8)
    return image


def _to_pixels(grid: Tensor, sample: SampleHistory) -> UInt8[Tensor, "3 height width"]:
    size = cell_size(*sample.canvas.shape)
    pixels = grid.repeat_interleave(size, dim=0).repeat_interleave(size, dim=1)
    return pixels.permute(2, 0, 1).contiguous()
