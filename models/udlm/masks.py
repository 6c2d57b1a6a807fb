"""The UDLM training mask over a row ``[canvas | encoder row]``."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Integer
from torch import Tensor

from xdllm.nn.masks import BlockDiffusionTokens
from xdllm_models.hybrid.masks import HybridTrainingMask


@dataclass(frozen=True)
class EncoderCanvasMask(HybridTrainingMask):
    """The hybrid's rule (:class:`~xdllm_models.hybrid.masks.HybridTrainingMask`) on a row whose
    first ``canvas_len`` tokens are the noisy canvas and the rest the clean encoder row.

    A canvas token of block ``b`` sees the canvas tokens of block ``b`` (bidirectional) and the
    encoder tokens of blocks ``< b`` (the prompt and the clean earlier blocks); an encoder token
    sees the encoder tokens at positions up to its own (causal). So the canvas reads exactly the
    keys a causal KV cache of the encoder holds when that block is decoded.
    """

    canvas_len: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.canvas_len < 1:
            raise ValueError(f"EncoderCanvasMask.canvas_len must be >= 1, got {self.canvas_len}")

    def tokens(self, document: Integer[Tensor, "batch len"], position: Integer[Tensor, "batch len"]
               ) -> BlockDiffusionTokens:
        """The row's tokens, those after the first ``canvas_len`` marked clean (the encoder's)."""
        batch, length = document.shape
        if length <= self.canvas_len:
            raise ValueError(f"EncoderCanvasMask: a row of {length} tokens has no encoder part after "
                             f"the {self.canvas_len} canvas tokens")
        clean = torch.arange(length, device=document.device) >= self.canvas_len
        return BlockDiffusionTokens(document, position, clean.expand(batch, length))
