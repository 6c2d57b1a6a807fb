"""Outputs shifted by one position: the layout of an autoregressive network, in a denoiser.

An autoregressive network's final state at position ``j - 1`` predicts the token at ``j``. A
denoiser started from its weights (``init_from=`` an ``arlm`` run) keeps that layout when the
logits for position ``j`` are read from the final state at ``j - 1`` (the "shift" of
DiffuLLaMA and Dream, which adapt AR models to diffusion): a
:class:`~xdllm.nn.RotaryTransformer` built with ``shift_outputs=True``. The first token of each
document (``bos``, never predicted) keeps its own state. Nothing else changes: attention stays
bidirectional, and every consumer of the logits (losses, evaluators, predictors, history) reads
position ``j``'s prediction at ``j`` as before.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Integer
from torch import Tensor


def read_from_previous_position(
    hidden: Float[Tensor, "batch seq_len d_model"],
    positions: Integer[Tensor, "batch seq_len"],
) -> Float[Tensor, "batch seq_len d_model"]:
    """``out[:, j] = hidden[:, j - 1]`` where ``positions[:, j] > 0`` (a token with one before it
    in its document), else ``hidden[:, j]`` (a document's first token, and padding)."""
    previous = torch.cat([hidden[:, :1], hidden[:, :-1]], dim=1)
    return torch.where((positions > 0).unsqueeze(-1), previous, hidden)
