"""DFlash position-decay cross-entropy for training block drafters (DFlash paper, Eq. 4).

A drafter predicts the ``block_size - 1`` positions after each block's clean anchor. Early
positions matter most for speculative acceptance, so offset ``k`` (1-based) gets weight
``exp(-(k - 1) / gamma)``. See ``docs/losses.md`` for the formulas and the fused path.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Integer, Shaped
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from xdllm.losses.output import DLLMLossOutput
from xdllm.losses.token_nll import (
    Count,
    clamped_denominator,
    gather_vocab_shards,
    per_token_nll,
)

_NORMALIZE_MODES = ("tokens", "mean")


def _positions_per_block(num_predicted: int, block_size: Optional[int]) -> Optional[int]:
    """``block_size - 1`` (predicted positions per block), or None when there are no blocks.

    Raises when the predicted sequence does not split into whole blocks.
    """
    if block_size is None or block_size <= 1:
        return None
    width = block_size - 1
    if num_predicted % width != 0:
        raise ValueError(
            f"DFlashDecayLoss: the predicted length T={num_predicted} must be a multiple of "
            f"block_size - 1 = {width} (block_size={block_size}); each block predicts "
            "block_size - 1 positions after its anchor")
    return width


class DFlashDecayLoss(nn.Module):
    """Decay-weighted cross-entropy over a drafter's predicted block positions.

    ``normalize="tokens"`` divides the weighted NLL sum by ``num_tokens`` (a global count of
    valid positions) or the local ``Σ block_mask``; ``"mean"`` divides by ``Σ w · block_mask``.
    The cross-entropy is always computed in float32.

    ``use_fused_linear_ce=True`` tells the caller to hand this loss the drafter's hidden states
    and LM-head weight through :meth:`forward_fused` instead of materialised logits through
    :meth:`forward`: the full ``[B, T, V]`` logits then never exist (one ``[chunk_size, V]``
    chunk at a time). Both entry points give the same result.
    """

    def __init__(self, loss_gamma: Optional[float] = 7.0, use_fused_linear_ce: bool = False,
                 chunk_size: int = 1024, normalize: str = "tokens") -> None:
        super().__init__()
        if loss_gamma is not None and not loss_gamma > 0:
            raise ValueError(f"DFlashDecayLoss: loss_gamma must be > 0 or None, got {loss_gamma}")
        if chunk_size < 1:
            raise ValueError(f"DFlashDecayLoss: chunk_size must be >= 1, got {chunk_size}")
        if normalize not in _NORMALIZE_MODES:
            raise ValueError(
                f"normalize must be one of {_NORMALIZE_MODES}, got {normalize!r}")
        self.loss_gamma = None if loss_gamma is None else float(loss_gamma)
        self.use_fused_linear_ce = bool(use_fused_linear_ce)
        self.chunk_size = int(chunk_size)
        self.normalize = normalize

    def forward(
        self,
        logits: Float[Tensor, "batch num_predicted vocab"],
        target_ids: Integer[Tensor, "batch num_predicted"],
        block_mask: Shaped[Tensor, "batch num_predicted"],
        num_tokens: Optional[Count] = None,
        block_size: Optional[int] = None,
    ) -> DLLMLossOutput:
        """The loss from materialised drafter logits ``[B, T, V]``, ``T = N · (block_size - 1)``.

        ``block_mask`` marks valid (non-padding) positions; ``block_size`` restarts the decay at
        every block and enables the per-offset draft counts. DTensor (vocab-sharded) logits are
        gathered first.
        """
        _positions_per_block(target_ids.shape[1], block_size)
        logits = gather_vocab_shards(logits)
        token_nll = per_token_nll(logits.float(), target_ids)
        with torch.no_grad():
            correct = logits.argmax(dim=-1) == target_ids
        correct_per_pos, count_per_pos = self._draft_acc_per_pos(correct, block_mask, block_size)
        return self._reduce(token_nll, block_mask, num_tokens, block_size,
                            correct_per_pos, count_per_pos)

    def forward_fused(
        self,
        hidden: Float[Tensor, "batch num_predicted dim"],
        lm_head_weight: Float[Tensor, "vocab dim"],
        target_ids: Integer[Tensor, "batch num_predicted"],
        block_mask: Shaped[Tensor, "batch num_predicted"],
        num_tokens: Optional[Count] = None,
        block_size: Optional[int] = None,
        lm_head_bias: Optional[Float[Tensor, " vocab"]] = None,
    ) -> DLLMLossOutput:
        """The same loss as :meth:`forward` on ``hidden @ lm_head_weight.T + lm_head_bias``,
        without materialising those logits.

        The ``B · T`` predicted positions are processed ``chunk_size`` at a time; each chunk's
        projection, cross-entropy and argmax run under ``torch.utils.checkpoint``, so autograd
        keeps only the chunk's inputs and recomputes its ``[chunk_size, V]`` logits during
        backward. Plain autograd throughout, so FSDP2 and DTensor parameters see their
        gradients (DTensor weights are gathered).
        """
        batch, num_predicted, dim = hidden.shape
        _positions_per_block(num_predicted, block_size)
        lm_head_weight = gather_vocab_shards(lm_head_weight)
        if lm_head_bias is not None:
            lm_head_bias = gather_vocab_shards(lm_head_bias)
        nll_chunks, correct_chunks = [], []
        for hidden_chunk, target_chunk in zip(hidden.reshape(-1, dim).split(self.chunk_size),
                                              target_ids.reshape(-1).split(self.chunk_size)):
            nll, correct = checkpoint(self._chunk_nll, hidden_chunk, lm_head_weight,
                                      lm_head_bias, target_chunk, use_reentrant=False)
            nll_chunks.append(nll)
            correct_chunks.append(correct)
        token_nll = torch.cat(nll_chunks).view(batch, num_predicted)
        correct = torch.cat(correct_chunks).view(batch, num_predicted)
        correct_per_pos, count_per_pos = self._draft_acc_per_pos(correct, block_mask, block_size)
        return self._reduce(token_nll, block_mask, num_tokens, block_size,
                            correct_per_pos, count_per_pos)

    @staticmethod
    def _chunk_nll(
        hidden_chunk: Float[Tensor, "chunk dim"],
        lm_head_weight: Float[Tensor, "vocab dim"],
        lm_head_bias: Optional[Float[Tensor, " vocab"]],
        target_chunk: Integer[Tensor, " chunk"],
    ) -> tuple[Float[Tensor, " chunk"], Bool[Tensor, " chunk"]]:
        """Project one chunk of positions; return its float32 NLL and its argmax hits.

        Run under checkpoint by the caller, so these ``[chunk, V]`` logits are freed on return
        and recomputed in backward. The argmax is not differentiable and costs no backward.
        """
        logits = F.linear(hidden_chunk, lm_head_weight, lm_head_bias)
        nll = F.cross_entropy(logits.float(), target_chunk, reduction="none")
        return nll, logits.detach().argmax(dim=-1) == target_chunk

    def _decay_weights(self, T: int, block_size: Optional[int], device: torch.device | str,
                       dtype: torch.dtype) -> Float[Tensor, " T"]:
        """Eq. 4 weights for ``T`` predicted positions: ``exp(-(k - 1) / gamma)``.

        ``k - 1`` is the offset inside the block (restarting at every block) when
        ``block_size`` is given, else the position in one run over all ``T``. All ones when
        ``loss_gamma`` is None.
        """
        if self.loss_gamma is None:
            return torch.ones(T, device=device, dtype=dtype)
        offsets = torch.arange(T, device=device)
        width = _positions_per_block(T, block_size)
        if width is not None:
            offsets = offsets % width
        return torch.exp(-offsets.to(torch.float32) / self.loss_gamma).to(dtype)

    @staticmethod
    def _draft_acc_per_pos(
        correct: Shaped[Tensor, "batch T"],
        block_mask: Shaped[Tensor, "batch T"],
        block_size: Optional[int],
    ) -> tuple[Optional[Integer[Tensor, " width"]], Optional[Integer[Tensor, " width"]]]:
        """Argmax hits and valid positions per offset ``k = 1 .. block_size - 1``.

        Summed over batch and blocks (shape ``[block_size - 1]``, int64) so ranks can
        all-reduce them. ``(None, None)`` without block structure.
        """
        width = _positions_per_block(correct.shape[1], block_size)
        if width is None:
            return None, None
        valid = block_mask != 0
        hits = (correct.bool() & valid).reshape(correct.shape[0], -1, width)
        return hits.sum(dim=(0, 1)), valid.reshape(correct.shape[0], -1, width).sum(dim=(0, 1))

    def _reduce(
        self,
        token_nll: Float[Tensor, "batch T"],
        block_mask: Shaped[Tensor, "batch T"],
        num_tokens: Optional[Count],
        block_size: Optional[int],
        draft_correct_per_pos: Optional[Tensor] = None,
        draft_count_per_pos: Optional[Tensor] = None,
    ) -> DLLMLossOutput:
        """Apply decay weights and the block mask, sum, and normalise."""
        mask = block_mask.to(torch.float32)
        weights = self._decay_weights(token_nll.shape[1], block_size, token_nll.device,
                                      torch.float32)
        weighted_mask = weights * mask
        # where, not a plain product: an inf NLL on a padding position must not become NaN.
        numerator = torch.where(mask != 0, token_nll.float() * weighted_mask, 0.0).sum()
        if self.normalize == "tokens":
            loss = numerator / clamped_denominator(mask.sum(), num_tokens)
        else:
            # A weighted mean: no clamp to 1 (weights may sum below 1); the tiny floor only
            # turns 0/0 into 0 for an all-padding batch.
            loss = numerator / weighted_mask.sum().clamp_min(torch.finfo(torch.float32).tiny)
        return DLLMLossOutput(loss, loss.detach(), draft_correct_per_pos, draft_count_per_pos)
