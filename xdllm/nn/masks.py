"""Mask rules: which keys each query may attend, defined once for SDPA and FlexAttention.

A rule is a small frozen dataclass with one predicate, :meth:`MaskRule.allows`, over the
attributes of a query token and a key token (a :class:`Tokens` tuple: document id and position,
plus whatever else the rule reads). From that predicate the rule derives

- :meth:`MaskRule.mask_mod`: FlexAttention's ``mask_mod(b, h, q_idx, kv_idx)``, which looks up
  the two tokens' attributes by index and calls ``allows``;
- :meth:`MaskRule.dense`: that same ``mask_mod`` called once on broadcast index grids
  ``b [B,1,1,1]``, ``q_idx [1,1,Q,1]``, ``kv_idx [1,1,1,K]``, giving SDPA's ``[B, 1, Q, K]`` mask;
- :meth:`MaskRule.block_mask`: FlexAttention's ``BlockMask``, from the dense mask reduced block
  by block where the lengths are whole blocks (:mod:`xdllm.nn.block_masks`), else from
  ``create_block_mask``; the ``mask_mod`` decides inside the partial blocks.

Both masks come from one Python function evaluated at every (query, key) pair, so they cannot
disagree. Every rule keeps attention inside a document: padding carries
:data:`PAD_DOCUMENT_ID` and every rule lets a token see itself, so no row is ever fully masked.
Blocks are counted from positions (``position // block_size``), and positions restart at 0 in
every packed document, so blocks start at each document's first token.

A new rule (for example an anchor-block mask for a drafter) is one more subclass: ``allows``,
and ``tokens`` when it reads attributes beyond document and position.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple, no_type_check

import torch
from jaxtyping import Bool, Integer
from torch import Tensor
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from xdllm.nn.block_masks import block_mask_from_dense, fits_blocks

PAD_DOCUMENT_ID = -1
"""Document id of padding tokens; real tokens' ids (segment ids) must be >= 0."""

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


class Tokens(NamedTuple):
    """Per-token attributes a rule reads, each ``[batch, len]``: the document id
    (:data:`PAD_DOCUMENT_ID` for padding) and the position inside the document (the RoPE
    position). Inside ``allows`` the same fields hold the values at the looked-up indices.
    A rule that reads more uses its own tuple type, starting with these two fields."""

    document: Tensor
    position: Tensor


class BlockDiffusionTokens(NamedTuple):
    """:class:`Tokens` plus ``clean``: True on the ``x_0`` half of an ``[x_t | x_0]`` row."""

    document: Tensor
    position: Tensor
    clean: Tensor


@no_type_check  # traced inside compiled FlexAttention: no type-checking wrapper (see MaskRule)
def _lookup(tokens: tuple, b: Tensor, index: Tensor) -> tuple:
    """The attributes of the tokens at ``(b, index)``, in the same tuple type."""
    return type(tokens)(*(field[b, index] for field in tokens))


@dataclass(frozen=True)
class MaskRule:
    """Base of all rules; subclasses define :meth:`allows` (and :meth:`tokens` if needed).

    ``allows`` runs inside compiled FlexAttention, so it must be plain tensor code and carry
    ``@typing.no_type_check``: a type-checking wrapper there (such as the test suite's jaxtyping
    import hook) breaks the traced graph. Defining a rule without it fails at class creation.
    """

    attends_whole_document: ClassVar[bool] = False
    """True when a token sees its whole document: without document ids, no mask is needed."""
    decodes_with_cache: ClassVar[bool] = False
    """True when no token sees a later block, so keys cached for a prefix stay valid while
    whole blocks are appended after it (causal decoding is the case of blocks of one token).
    Such a rule reads only :class:`Tokens` (document and position): that is what the cache keeps."""
    reads_stale_cache: ClassVar[bool] = False
    """True for a rule that reads cached keys knowing they may be stale: computed before tokens
    they attend to (later in the sequence, under a bidirectional rule) changed. An approximation
    its caller opts into (the predictor's ``prefix_cache``); the cache refuses every other rule
    that does not decode with a cache."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        allows = cls.__dict__.get("allows")
        if allows is not None and not getattr(allows, "__no_type_check__", False):
            raise TypeError(f"{cls.__name__}.allows must be decorated with @typing.no_type_check")

    def tokens(
        self, document: Integer[Tensor, "batch len"], position: Integer[Tensor, "batch len"]
    ) -> tuple:
        """The attributes this rule reads for a row of tokens (default: :class:`Tokens`)."""
        return Tokens(document, position)

    @no_type_check
    def allows(self, query: tuple, key: tuple) -> Tensor:
        """Whether ``query`` may attend ``key``; elementwise over broadcastable attributes."""
        raise NotImplementedError

    def mask_mod(self, query: tuple, key: tuple) -> MaskMod:
        """FlexAttention's ``mask_mod`` for queries ``query`` over keys ``key``."""
        # A lambda on purpose: flex counts the mask_mod's positional args, and the tests'
        # jaxtyping import hook would wrap a ``def`` (even unannotated) behind ``*args``.
        return lambda b, h, q_idx, kv_idx: self.allows(_lookup(query, b, q_idx), _lookup(key, b, kv_idx))

    def dense(self, query: tuple, key: tuple) -> Bool[Tensor, "batch 1 q_len kv_len"]:
        """SDPA's boolean mask: :meth:`mask_mod` evaluated at every (batch, query, key)."""
        batch, q_len = query.document.shape
        kv_len = key.document.shape[1]
        device = query.document.device
        b = torch.arange(batch, device=device).view(batch, 1, 1, 1)
        h = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=device)
        q_idx = torch.arange(q_len, device=device).view(1, 1, q_len, 1)
        kv_idx = torch.arange(kv_len, device=device).view(1, 1, 1, kv_len)
        return self.mask_mod(query, key)(b, h, q_idx, kv_idx).expand(batch, 1, q_len, kv_len)

    def block_mask(self, query: tuple, key: tuple) -> BlockMask:
        """FlexAttention's block-sparse mask, built on the tokens' device: from :meth:`dense`
        where the lengths are whole blocks (:mod:`xdllm.nn.block_masks`), else by
        ``create_block_mask``."""
        batch, q_len = query.document.shape
        kv_len = key.document.shape[1]
        if fits_blocks(q_len, kv_len):
            return block_mask_from_dense(self.dense(query, key), self.mask_mod(query, key))
        return create_block_mask(self.mask_mod(query, key), B=batch, H=None, Q_LEN=q_len, KV_LEN=kv_len,
                                 device=query.document.device)


@dataclass(frozen=True)
class DocumentMask(MaskRule):
    """Bidirectional inside a document: a token sees every token of its document."""

    attends_whole_document: ClassVar[bool] = True

    @no_type_check
    def allows(self, query: Tokens, key: Tokens) -> Tensor:
        return query.document == key.document


@dataclass(frozen=True)
class StalePrefixMask(DocumentMask):
    """:class:`DocumentMask` over a cached prefix whose keys and values were computed at an
    earlier step: new tokens see every token of their document, cached or new, but the prefix's
    keys do not reflect what was written after them since (Fast-dLLM's approximate prefix cache,
    ``prefix_cache`` in :mod:`xdllm.predict.prefix_cache`)."""

    reads_stale_cache: ClassVar[bool] = True


@dataclass(frozen=True)
class CausalMask(MaskRule):
    """Causal inside a document: a token sees the tokens of its document at positions <= its own."""

    decodes_with_cache: ClassVar[bool] = True

    @no_type_check
    def allows(self, query: Tokens, key: Tokens) -> Tensor:
        return (query.document == key.document) & (key.position <= query.position)


@no_type_check  # traced inside compiled FlexAttention
def pair_draw(salt: Tensor, query_position: Tensor, key_position: Tensor) -> Tensor:
    """A pseudo-random integer in ``[0, 2**24)`` for each (salt, query position, key position):
    a multiply-xorshift hash in int64 arithmetic (every product stays below 2**63), so FlexAttention
    can evaluate it inside a ``mask_mod`` as SDPA's dense mask does."""
    x = (salt * 0x27D4EB2F + query_position * 0x165667B1 + key_position * 0x61C88647) & 0xFFFFFFFF
    x = ((x ^ (x >> 15)) * 0x2C1B3C6D) & 0xFFFFFFFF
    x = ((x ^ (x >> 12)) * 0x297A2D39) & 0xFFFFFFFF
    return (x ^ (x >> 15)) & 0xFFFFFF


PAIR_DRAWS = 1 << 24
"""The number of values :func:`pair_draw` takes."""


@dataclass(frozen=True, eq=False)
class AnnealedCausalMask(MaskRule):
    """Causal inside a document, plus each later key of the document with probability
    ``visible``: attention annealed from causal (``visible`` 0) to bidirectional (1), for
    adapting an autoregressive network to diffusion (DiffuLLaMA's attention mask annealing).
    Which later keys a query sees is a hash of ``(salt, query position, key position)``: the
    same in every row, head and document of a forward, another for another ``salt``. Both fields
    are 0-d tensors (on the tokens' device), so a compiled mask does not change with them."""

    visible: Tensor
    salt: Tensor

    @no_type_check
    def allows(self, query: Tokens, key: Tokens) -> Tensor:
        later_seen = pair_draw(self.salt, query.position, key.position) < self.visible * PAIR_DRAWS
        return (query.document == key.document) & ((key.position <= query.position) | later_seen)


@dataclass(frozen=True)
class BlockCausalMask(MaskRule):
    """Bidirectional inside a block of ``block_size`` positions, causal across blocks: a token
    sees its document's tokens in its own block and in earlier blocks."""

    block_size: int
    decodes_with_cache: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"BlockCausalMask.block_size must be >= 1, got {self.block_size}")

    @no_type_check
    def allows(self, query: Tokens, key: Tokens) -> Tensor:
        same_document = query.document == key.document
        return same_document & (key.position // self.block_size <= query.position // self.block_size)


@dataclass(frozen=True)
class BlockDiffusionMask(MaskRule):
    """Block-diffusion training over a row ``[x_t | x_0]``: a noisy copy of a sequence of
    length N, then the clean sequence, with the same document ids and positions in both halves.

    A noisy token of block b sees the noisy tokens of block b (bidirectional) and the clean
    tokens of blocks < b; a clean token of block b sees the clean tokens of blocks <= b. So a
    noisy block is denoised from the clean blocks before it and never sees itself clean or any
    later block. Positions must be passed explicitly (the second half repeats the first's).
    """

    block_size: int

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"BlockDiffusionMask.block_size must be >= 1, got {self.block_size}")

    def tokens(
        self, document: Integer[Tensor, "batch len"], position: Integer[Tensor, "batch len"]
    ) -> BlockDiffusionTokens:
        """The row's tokens, the second half marked clean (the row length must be even)."""
        batch, length = document.shape
        if length % 2 != 0:
            raise ValueError(f"BlockDiffusionMask: an [x_t | x_0] row has an even length, got {length}")
        clean = torch.arange(length, device=document.device) >= length // 2
        return BlockDiffusionTokens(document, position, clean.expand(batch, length))

    @no_type_check
    def allows(self, query: BlockDiffusionTokens, key: BlockDiffusionTokens) -> Tensor:
        query_block = query.position // self.block_size
        key_block = key.position // self.block_size
        noisy_query_sees = torch.where(key.clean, key_block < query_block, key_block == query_block)
        clean_query_sees = key.clean & (key_block <= query_block)
        return (query.document == key.document) & torch.where(query.clean, clean_query_sees, noisy_query_sees)
