"""Rotary position embeddings (RoPE) with positions given per token.

Positions are an input, not ``arange(seq_len)``: packed rows restart them at 0 in every
document and left-padded prompts start them at their first real token, so a document is
embedded the same way wherever it sits in a row.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Integer
from torch import Tensor, nn


class RotaryEmbedding(nn.Module):
    """Precomputed rotation tables for positions ``[0, max_positions)``, looked up per token.

    The tables are as wide as a head, in the form :func:`apply_rotary` multiplies by:
    ``[cos, cos]`` and ``[-sin, sin]`` of each pair's angle. Built once here, not in every layer's
    rotation of queries and keys (six small operations a layer fewer per forward pass).
    """

    def __init__(self, head_dim: int, max_positions: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2 != 0:
            raise ValueError(f"RotaryEmbedding: head_dim must be even, got {head_dim}")
        if max_positions < 1:
            raise ValueError(f"RotaryEmbedding: max_positions must be >= 1, got {max_positions}")
        inverse_frequency = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float64), inverse_frequency)
        cos, sin = angles.cos().float(), angles.sin().float()
        # Not persistent: derived from the config, so checkpoints stay free of them.
        self.register_buffer("cos_table", torch.cat((cos, cos), dim=-1), persistent=False)
        self.register_buffer("sin_table", torch.cat((-sin, sin), dim=-1), persistent=False)
        self.max_positions = max_positions

    def forward(
        self, positions: Integer[Tensor, "batch seq_len"]
    ) -> tuple[Float[Tensor, "batch seq_len head_dim"], Float[Tensor, "batch seq_len head_dim"]]:
        """``[cos, cos]`` and ``[-sin, sin]`` of every token's rotation angles (positions must be
        < max_positions): what :func:`apply_rotary` takes."""
        return self.cos_table[positions], self.sin_table[positions]


def apply_rotary(
    x: Float[Tensor, "batch heads seq_len head_dim"],
    cos: Float[Tensor, "batch seq_len head_dim"],
    sin: Float[Tensor, "batch seq_len head_dim"],
) -> Float[Tensor, "batch heads seq_len head_dim"]:
    """Rotate pairs ``(x[i], x[i + head_dim/2])`` by each token's angles (computed in float32), as
    ``x * [cos, cos] + [second, first] * [-sin, sin]`` with the tables of :class:`RotaryEmbedding`:
    the same products and sums as rotating each half apart, so the same bits, in fewer passes
    over ``x``."""
    x32 = x.float()
    first, second = x32.chunk(2, dim=-1)
    return (x32 * cos[:, None] + torch.cat((second, first), dim=-1) * sin[:, None]).type_as(x)
