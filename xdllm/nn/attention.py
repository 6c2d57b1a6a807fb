"""Attention behind one switch: SDPA with a dense mask, or FlexAttention with a block mask.

Which keys a query may attend is decided by a mask rule (:mod:`xdllm.nn.masks`) over per-token
*document ids* and positions. Packed rows use their ``segment_ids`` as document ids; padding
gets a document of its own (:data:`PAD_DOCUMENT_ID`), so real tokens never see padding and a
padding token still has itself to attend to (no fully masked row, no NaN).

- ``"sdpa"``: ``F.scaled_dot_product_attention`` with the rule's boolean ``[batch, 1, Q, K]`` mask.
- ``"flex"``: compiled ``flex_attention`` with the rule's block-sparse ``BlockMask``
  (:meth:`~xdllm.nn.masks.MaskRule.block_mask`), built on the tensors' device, once per forward
  and shared by all layers.
  Forwards through flex are padded to a few fixed shapes (:mod:`xdllm.nn.buckets`), so it
  compiles once per bucket, not once per batch width.
- ``"auto"``: flex on CUDA (where it trains); SDPA elsewhere, because in torch 2.13
  FlexAttention has no CPU backward. Flex on CPU is allowed for inference when asked for.
"""

from __future__ import annotations

import functools
from typing import Literal, Optional, Union

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Integer
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from xdllm.nn.buckets import allow_shape_buckets, pad_tokens
from xdllm.nn.masks import PAD_DOCUMENT_ID, MaskRule

AttentionBackend = Literal["sdpa", "flex"]
BackendRequest = Literal["auto", "sdpa", "flex"]
AttentionMask = Union[Bool[Tensor, "batch 1 q_len kv_len"], BlockMask, None]

def resolve_attention_backend(requested: BackendRequest, device: torch.device) -> AttentionBackend:
    """The backend to use on ``device`` for a requested ``"auto" | "sdpa" | "flex"``."""
    if requested == "auto":
        return "flex" if device.type == "cuda" else "sdpa"
    if requested in ("sdpa", "flex"):
        return requested
    raise ValueError(f"attn_backend must be 'auto', 'sdpa' or 'flex', got {requested!r}")


def check_backend_can_run(backend: AttentionBackend, device: torch.device) -> None:
    """Fail early, with a way out, where FlexAttention could run forward but not backward."""
    if backend == "flex" and device.type != "cuda" and torch.is_grad_enabled():
        raise RuntimeError(
            f"attn_backend='flex' on {device.type}: FlexAttention has no backward pass off CUDA "
            "in this torch version; train with attn_backend='sdpa' (or 'auto'), or run "
            "inference under torch.no_grad() / torch.inference_mode()"
        )


def document_ids_for(
    attention_mask: Optional[Bool[Tensor, "batch seq_len"]],
    segment_ids: Optional[Integer[Tensor, "batch seq_len"]],
) -> Optional[Integer[Tensor, "batch seq_len"]]:
    """Per-token document ids, or None when all tokens belong to one document.

    ``segment_ids`` alone already isolate documents (padding must carry an id no document
    uses, e.g. :data:`PAD_DOCUMENT_ID`). ``attention_mask`` (True on real tokens) moves padding
    into :data:`PAD_DOCUMENT_ID`.
    """
    if segment_ids is None and attention_mask is None:
        return None
    if segment_ids is None:
        assert attention_mask is not None
        segment_ids = torch.zeros(attention_mask.shape, dtype=torch.long, device=attention_mask.device)
    if attention_mask is None:
        return segment_ids
    return torch.where(attention_mask, segment_ids, PAD_DOCUMENT_ID)


def build_attention_mask(
    backend: AttentionBackend,
    rule: MaskRule,
    document_ids: Optional[Integer[Tensor, "batch seq_len"]],
    positions: Integer[Tensor, "batch seq_len"],
    padded_shape: Optional[tuple[int, int]] = None,
) -> AttentionMask:
    """The self-attention mask every layer shares for one forward pass under ``rule``.

    None (no mask: SDPA's fastest path) when all tokens form one document and the rule lets a
    token see its whole document. ``padded_shape``: the ``(rows, width)`` bucket the forward is
    padded to; the added slots form a document of their own (:mod:`xdllm.nn.buckets`).
    """
    padded = padded_shape is not None and padded_shape != tuple(positions.shape)
    if document_ids is None:
        if rule.attends_whole_document and not padded:
            return None
        document_ids = torch.zeros_like(positions)
    tokens = rule.tokens(document_ids, positions)  # on the real row: a rule may read its length
    if padded:
        tokens = pad_tokens(tokens, padded_shape)
    return rule.dense(tokens, tokens) if backend == "sdpa" else rule.block_mask(tokens, tokens)


@functools.cache
def _compiled_flex_attention():
    # Compiled once per process; eager flex_attention materialises the full score matrix.
    allow_shape_buckets()
    return torch.compile(flex_attention, dynamic=False)


def attend(
    query: Float[Tensor, "batch heads q_len head_dim"],
    key: Float[Tensor, "batch heads kv_len head_dim"],
    value: Float[Tensor, "batch heads kv_len head_dim"],
    backend: AttentionBackend,
    mask: AttentionMask,
) -> Float[Tensor, "batch heads q_len head_dim"]:
    """Attention of ``query`` over ``key``/``value`` under ``mask`` (None: every key)."""
    if backend == "sdpa":
        if isinstance(mask, BlockMask):
            raise TypeError("attend: a FlexAttention BlockMask needs backend 'flex', got 'sdpa'")
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    if mask is not None and not isinstance(mask, BlockMask):
        raise TypeError(f"attend: backend 'flex' needs a BlockMask or None, got {type(mask).__name__}")
    if torch.compiler.is_compiling():  # inside a compiled model: traced with the rest of it
        return flex_attention(query, key, value, block_mask=mask)
    return _compiled_flex_attention()(query, key, value, block_mask=mask)
