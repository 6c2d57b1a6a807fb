"""DFlash training loss: ``DFlashDecayLoss`` on the drafted positions of the sampled blocks.

One step: the frozen target reads the clean rows (features of its evenly spread layers, no
logits); every anchor of a row opens a block ``[anchor, MASK x (block_size - 1)]`` embedded by
the target; the drafter runs all blocks of the batch in one pass under
:class:`~xdllm_models.dflash.mask.DFlashMask`; the ``block_size - 1`` drafted positions of each
block are scored against the row's next tokens with the position-decay cross-entropy, through
the target's (frozen) LM head. For large vocabularies the fused chunked path never materialises
the drafted logits (``use_fused_linear_ce``, on by default from :data:`FUSED_MIN_VOCAB` tokens).
The denominator is the number of supervised drafted positions of the whole optimizer step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.interfaces import LossContext
from xdllm.losses import DFlashDecayLoss
from xdllm.losses.output import DLLMLossOutput
from xdllm.nn import PAD_DOCUMENT_ID, RotaryTransformer
from xdllm.nn.transformer import default_positions
from xdllm_models.dflash.mask import block_tokens, context_tokens
from xdllm_models.dflash.model import DFlashDrafter
from xdllm_models.dflash.target import require_target, target_features

COUNT_KEY = "num_draft_tokens"
FUSED_MIN_VOCAB = 4096
"""Vocabulary size from which ``use_fused_linear_ce=None`` takes the fused chunked path."""


def position_metric(offset: int, block_size: int) -> str:
    """``draft_acc_pos_<offset>``, the offset zero-padded to the digits of ``block_size - 1`` so
    that the names sort by position (``pos_02`` before ``pos_10`` at block size 16)."""
    return f"draft_acc_pos_{offset:0{len(str(block_size - 1))}d}"


def block_labels(batch: Mapping[str, Any], block_size: int
                 ) -> tuple[Integer[Tensor, "batch drafted"], Bool[Tensor, "batch drafted"]]:
    """The tokens each block must draft (the ``block_size - 1`` after its anchor, block-major)
    and which of them count: inside the row, of a real (not padding) block."""
    input_ids, real = batch["input_ids"], batch["attention_mask"].bool()
    anchors, anchor_valid = batch["anchor_positions"], batch["anchor_valid"].bool()
    rows, width = input_ids.shape
    columns = (anchors[:, :, None] + torch.arange(1, block_size, device=anchors.device)).reshape(rows, -1)
    inside = columns < width
    columns = columns.clamp(max=width - 1)
    labels = input_ids.gather(1, columns)
    valid = inside & real.gather(1, columns) & anchor_valid.repeat_interleave(block_size - 1, dim=1)
    return labels, valid


def draft_counts_per_position(batch: Mapping[str, Any], block_size: int) -> Integer[Tensor, " width"]:
    """Supervised drafted positions per offset ``1 .. block_size - 1`` (the accuracy's counts)."""
    _, valid = block_labels(batch, block_size)
    return valid.view(valid.shape[0], -1, block_size - 1).sum(dim=(0, 1))


class DFlashLoss:
    """See the module docstring.

    Args:
        mask_token_id: the token filling a block after its anchor.
        block_size: tokens per block, the anchor included (the drafter's).
        loss_gamma: decay of the weight with the offset, ``exp(-(k - 1) / gamma)`` (None: flat).
        use_fused_linear_ce: project through the LM head chunk by chunk, never holding the
            drafted logits (None: when the vocabulary has at least :data:`FUSED_MIN_VOCAB` tokens).
        chunk_size: positions per chunk of the fused path.
    """

    def __init__(self, mask_token_id: int, block_size: int = 8, loss_gamma: Optional[float] = 7.0,
                 use_fused_linear_ce: Optional[bool] = None, chunk_size: int = 1024) -> None:
        if block_size < 2:
            raise ValueError(f"DFlashLoss: block_size must be >= 2, got {block_size}")
        self.mask_token_id = mask_token_id
        self.block_size = block_size
        self.use_fused_linear_ce = use_fused_linear_ce
        self.decay_loss = DFlashDecayLoss(loss_gamma=loss_gamma, chunk_size=chunk_size)

    def token_counts(self, batch: Mapping[str, Any]) -> dict[str, Tensor]:
        return {COUNT_KEY: block_labels(batch, self.block_size)[1].sum()}

    def fused(self, vocab_size: int) -> bool:
        """Whether this loss projects chunk by chunk for a vocabulary of ``vocab_size``."""
        if self.use_fused_linear_ce is None:
            return vocab_size >= FUSED_MIN_VOCAB
        return self.use_fused_linear_ce

    def drafted_hidden(self, model: DFlashDrafter, target: RotaryTransformer, batch: Mapping[str, Any]
                       ) -> Float[Tensor, "batch drafted d_model"]:
        """The drafter's final hidden states at every drafted position, block-major."""
        if model.block_size != self.block_size:
            raise ValueError(f"DFlashLoss: block_size={self.block_size} but the drafter was built for "
                             f"{model.block_size}; set both from dflash.block_size")
        input_ids, real = batch["input_ids"], batch["attention_mask"].bool()
        anchors, anchor_valid = batch["anchor_positions"], batch["anchor_valid"].bool()
        rows, blocks = anchors.shape
        positions = default_positions(input_ids.shape[1], real, None, input_ids.device).expand_as(input_ids)
        features = target_features(target, model.target_layers, input_ids, real, positions)
        context = context_tokens(torch.where(real, 0, PAD_DOCUMENT_ID), positions)
        queries = block_tokens(anchors, self.block_size)
        queries = queries._replace(document=torch.where(
            anchor_valid.repeat_interleave(self.block_size, dim=1), 0, PAD_DOCUMENT_ID))
        block_ids = torch.full((rows, blocks, self.block_size), self.mask_token_id, dtype=torch.long,
                               device=input_ids.device)
        block_ids[:, :, 0] = input_ids.gather(1, anchors)
        with torch.no_grad():
            embeddings = target.token_embedding(block_ids.view(rows, -1))
        hidden = model(embeddings, queries, features, context)
        drafted = hidden.view(rows, blocks, self.block_size, -1)[:, :, 1:]  # the anchors are not drafted
        return drafted.reshape(rows, blocks * (self.block_size - 1), -1)

    def outputs(self, model: DFlashDrafter, batch: Mapping[str, Any],
                context: LossContext | None = None) -> DLLMLossOutput:
        """The decay loss with its per-offset draft counts."""
        target = require_target(context.frozen if context is not None else None, "DFlashLoss")
        hidden = self.drafted_hidden(model, target, batch)
        labels, valid = block_labels(batch, self.block_size)
        counts = context.counts if context is not None else None
        num_tokens = None if counts is None else counts[COUNT_KEY]
        weight = target.lm_head.weight
        if self.fused(weight.shape[0]):
            return self.decay_loss.forward_fused(hidden, weight, labels, valid, num_tokens, self.block_size)
        return self.decay_loss(model.logits(hidden, target), labels, valid, num_tokens, self.block_size)

    def __call__(self, model: DFlashDrafter, batch: Mapping[str, Any],
                 context: LossContext | None = None) -> dict[str, Tensor]:
        """``loss``, ``draft_accuracy`` and ``draft_acc_pos_k`` (argmax accuracy at offset k, see
        :func:`position_metric`)."""
        out = self.outputs(model, batch, context)
        correct = out.draft_correct_per_pos.float()
        count = out.draft_count_per_pos.float()
        logged = {"loss": out.total_loss, "draft_accuracy": correct.sum() / count.sum().clamp_min(1.0)}
        accuracy = correct / count.clamp_min(1.0)
        for offset in range(1, self.block_size):
            logged[position_metric(offset, self.block_size)] = accuracy[offset - 1]
        return logged
