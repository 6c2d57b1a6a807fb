"""A bidirectional pre-norm transformer with rotary positions, readable top to bottom.

token ids -> embedding -> n_layers x [norm -> attention -> residual, norm -> MLP -> residual]
-> final norm -> logits. Positions enter only through RoPE, so packed documents (positions
restarting at 0) and padded batches (positions counting real tokens) embed a document the same
way wherever it sits. Which tokens see which is decided once per forward by
:mod:`xdllm.nn.attention`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Optional, Union

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn
from torch.nn.attention.flex_attention import BlockMask

from xdllm.nn.attention import (
    AttentionBackend,
    AttentionMask,
    build_attention_mask,
    check_backend_can_run,
    document_ids_for,
    resolve_attention_backend,
)
from xdllm.nn.buckets import allow_shape_buckets, bucket_shape, pad_to
from xdllm.nn.kv_cache import CachedLayer, KVCache
from xdllm.nn.layers import RotaryTransformerConfig, TransformerBlock, make_norm
from xdllm.nn.masks import DocumentMask, MaskRule, Tokens
from xdllm.nn.rotary import RotaryEmbedding
from xdllm.nn.shifted_outputs import read_from_previous_position

logger = logging.getLogger(__name__)


def default_positions(
    seq_len: int,
    attention_mask: Optional[Bool[Tensor, "batch seq_len"]],
    segment_ids: Optional[Integer[Tensor, "batch seq_len"]],
    device: torch.device,
) -> Integer[Tensor, "batch seq_len"] | Integer[Tensor, "1 seq_len"]:
    """RoPE positions = number of real tokens before this one in its segment, clamped at 0.

    No mask, no segments: ``arange``. Mask only: ``cumsum(mask) - 1`` clamped at 0, so a
    left-padded sequence gets the positions it has unpadded. Segments: the same count,
    restarting wherever the segment id changes (packed documents start at 0).
    """
    if attention_mask is None and segment_ids is None:
        return torch.arange(seq_len, device=device)[None]
    reference = attention_mask if attention_mask is not None else segment_ids
    assert reference is not None
    real = attention_mask.long() if attention_mask is not None else torch.ones_like(reference, dtype=torch.long)
    real_so_far = real.cumsum(dim=-1)
    if segment_ids is None:
        return (real_so_far - 1).clamp_min(0)
    starts_segment = torch.ones_like(segment_ids, dtype=torch.bool)
    starts_segment[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    # Real tokens before each segment's first token, carried forward (the count never decreases).
    real_before_segment = torch.where(starts_segment, real_so_far - real, 0).cummax(dim=-1).values
    return (real_so_far - real_before_segment - 1).clamp_min(0)


@dataclass(frozen=True)
class TransformerOutput:
    """:meth:`RotaryTransformer.forward`'s result when hidden states are asked for.

    ``hidden_states[j]`` is the residual stream after block ``output_hidden_states[j]``
    (before the final norm).
    """

    logits: Float[Tensor, "batch seq_len vocab"]
    hidden_states: tuple[Float[Tensor, "batch seq_len d_model"], ...]


class RotaryTransformer(nn.Module):
    """Token ids to logits ``[batch, seq_len, vocab]``; see the module docstring.

    No biases: every vector parameter is a norm weight, so grouping by ``ndim`` (matrices
    decay, vectors do not) is the whole weight-decay rule. The embedding is named
    ``token_embedding.weight`` for optimizers that also want to exclude it.
    """

    default_mask_rule: Optional[MaskRule] = None
    """The rule of a call that names neither ``mask_rule`` nor ``block_mask`` (None:
    :class:`~xdllm.nn.masks.DocumentMask`); a subclass may set its own, and then
    :meth:`forward` and :meth:`final_hidden` both follow it."""

    def __init__(self, config: RotaryTransformerConfig, shift_outputs: bool = False) -> None:
        super().__init__()
        self.config = config
        self.shifts_outputs = shift_outputs
        """Position ``j``'s final state (and logits) is read from position ``j - 1`` of its
        document (:mod:`xdllm.nn.shifted_outputs`); the per-block states are not shifted."""
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.rotary = RotaryEmbedding(config.d_model // config.n_heads, config.max_positions)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layers))
        self.final_norm = make_norm(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self._logged_backend: Optional[AttentionBackend] = None
        self._quiet = False  # set by backend_log_deferred
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, 0.02) weights; residual output projections scaled by 1/sqrt(2 n_layers)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for block in self.blocks:
            nn.init.normal_(block.attention.out.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.down.weight, mean=0.0, std=residual_std)

    def attention_backend(self, device: torch.device) -> AttentionBackend:
        """The backend this model uses on ``device`` (logged once when first chosen)."""
        backend = resolve_attention_backend(self.config.attn_backend, device)
        if backend != self._logged_backend and not self._quiet:
            logger.info("RotaryTransformer attention backend: %s (requested %r, device %s)",
                        backend, self.config.attn_backend, device.type)
            self._logged_backend = backend
        return backend

    def _runnable_backend(self, device: torch.device, block_mask: Optional[BlockMask]) -> AttentionBackend:
        """The configured backend, refused where it cannot run this forward."""
        backend = self.attention_backend(device)
        check_backend_can_run(backend, device)
        if block_mask is not None and backend != "flex":
            raise ValueError("RotaryTransformer.forward: block_mask given but the attention "
                             f"backend is {backend!r}; use attn_backend='flex'")
        return backend

    def _forward_backend(self, device: torch.device, block_mask: Optional[BlockMask],
                         segment_ids: Optional[Tensor]) -> AttentionBackend:
        """The backend of one forward: under ``"auto"``, inference on rows of one document each
        (validation, generation) takes SDPA, which has nothing to compile for each new width;
        training and packed rows take flex."""
        backend = self._runnable_backend(device, block_mask)
        if (backend == "flex" and self.config.attn_backend == "auto" and block_mask is None
                and segment_ids is None and not torch.is_grad_enabled()):
            return "sdpa"
        return backend

    def new_kv_cache(self, batch_size: int, max_len: int, dtype: Optional[torch.dtype] = None) -> KVCache:
        """An empty cache for ``batch_size`` rows of up to ``max_len`` tokens, on this model's
        device. ``dtype`` is the attention's compute dtype (default: autocast's where it is on
        for this device, as the keys and values come out of the projections; else the
        parameters'): a float32 cache under bf16 autocast would be cast whole to bf16 at every
        attention call."""
        weight = self.token_embedding.weight
        if dtype is None:
            autocasting = torch.is_autocast_enabled(weight.device.type)
            dtype = torch.get_autocast_dtype(weight.device.type) if autocasting else weight.dtype
        config = self.config
        return KVCache(config.n_layers, batch_size, config.n_heads, max_len, config.d_model // config.n_heads,
                       dtype=dtype, device=weight.device)

    def forward(
        self,
        input_ids: Integer[Tensor, "batch seq_len"],
        attention_mask: Optional[Bool[Tensor, "batch seq_len"]] = None,
        positions: Optional[Integer[Tensor, "batch seq_len"]] = None,
        segment_ids: Optional[Integer[Tensor, "batch seq_len"]] = None,
        block_mask: Optional[BlockMask] = None,
        *,
        mask_rule: Optional[MaskRule] = None,
        output_hidden_states: Optional[Sequence[int]] = None,
        kv_cache: Optional[KVCache] = None,
        write_cache: bool = True,
    ) -> Union[Float[Tensor, "batch seq_len vocab"], TransformerOutput]:
        """Logits for every position; a :class:`TransformerOutput` when ``output_hidden_states``
        is given.

        ``attention_mask``: True on real tokens (keys that may be attended). ``segment_ids``:
        packed documents; tokens attend only within their segment (padding needs an id of its
        own, e.g. -1). ``positions``: RoPE positions, defaulting to :func:`default_positions`;
        the mask rule reads them too (causal order, blocks). ``mask_rule``: who sees whom inside
        a document, default :attr:`default_mask_rule` (:class:`~xdllm.nn.masks.DocumentMask`, bidirectional,
        unless a subclass sets another).
        ``block_mask``: a prebuilt FlexAttention mask, used as is instead of a rule
        (``attention_mask`` and ``segment_ids`` then only shape the default positions).
        ``output_hidden_states``: block indices whose output residual stream to return.

        ``kv_cache``: decode after a cached prefix. The input is the new tokens only, with
        explicit ``positions``, under a rule that decodes with a cache (causal, block-causal)
        or one that knowingly reads a stale prefix (:class:`~xdllm.nn.masks.StalePrefixMask`);
        they attend to the cached prefix and to each other under the rule, always with SDPA.
        ``write_cache``: append the new tokens to the cache (False: only read it: the new keys and
        values pass through the free slots after the prefix, the prefix and fill length stay).
        """
        hidden, hidden_states = self._hidden(input_ids, attention_mask, positions, segment_ids, block_mask,
                                             mask_rule, output_hidden_states, kv_cache, write_cache)
        logits = self.lm_head(hidden)
        if output_hidden_states is None:
            return logits
        return TransformerOutput(logits, hidden_states)

    def final_hidden(
        self,
        input_ids: Integer[Tensor, "batch seq_len"],
        attention_mask: Optional[Bool[Tensor, "batch seq_len"]] = None,
        positions: Optional[Integer[Tensor, "batch seq_len"]] = None,
        segment_ids: Optional[Integer[Tensor, "batch seq_len"]] = None,
        block_mask: Optional[BlockMask] = None,
        *,
        mask_rule: Optional[MaskRule] = None,
        kv_cache: Optional[KVCache] = None,
        write_cache: bool = True,
        unshifted: bool = False,
    ) -> Float[Tensor, "batch seq_len d_model"]:
        """What :attr:`lm_head` reads (the final norm's output): :meth:`forward` without the
        projection to the vocabulary, for losses that project only the positions they supervise
        (:func:`xdllm.losses.chunked.chunked_token_nll`) and predictors that read a window.
        ``kv_cache`` and ``write_cache`` as in :meth:`forward`. ``unshifted``: each position's own
        final state even where the network shifts its outputs (``shift_outputs``), for a caller
        that moves them itself: the predictor's prefix cache, which runs the column before its
        window too; so also on a KV cache."""
        return self._hidden(input_ids, attention_mask, positions, segment_ids, block_mask, mask_rule,
                            None, kv_cache, write_cache, shift=not unshifted)[0]

    @property
    def lm_head_weight(self) -> Float[Tensor, "vocab d_model"]:
        """The projection :meth:`final_hidden` feeds (for losses that project chunk by chunk)."""
        return self.lm_head.weight

    def layer_states(
        self,
        input_ids: Integer[Tensor, "batch seq_len"],
        layers: Sequence[int],
        attention_mask: Optional[Bool[Tensor, "batch seq_len"]] = None,
        positions: Optional[Integer[Tensor, "batch seq_len"]] = None,
        segment_ids: Optional[Integer[Tensor, "batch seq_len"]] = None,
        *,
        mask_rule: Optional[MaskRule] = None,
    ) -> tuple[Float[Tensor, "batch seq_len d_model"], ...]:
        """The residual streams after the blocks in ``layers`` (as :meth:`forward`'s
        ``output_hidden_states``) without the projection to the vocabulary, for models that read
        another's features (a drafter reading its frozen target) and need no logits."""
        return self._hidden(input_ids, attention_mask, positions, segment_ids, None, mask_rule,
                            layers, None, True)[1]

    def _hidden(
        self,
        input_ids: Tensor,
        attention_mask: Optional[Tensor],
        positions: Optional[Tensor],
        segment_ids: Optional[Tensor],
        block_mask: Optional[BlockMask],
        mask_rule: Optional[MaskRule],
        output_hidden_states: Optional[Sequence[int]],
        kv_cache: Optional[KVCache],
        write_cache: bool,
        shift: bool = True,
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        """The final-norm output (moved one position with ``shift_outputs``, unless ``shift`` is
        False) and the chosen blocks' residual streams (see :meth:`forward`)."""
        if mask_rule is None and block_mask is None:
            mask_rule = self.default_mask_rule
        self._check_inputs(input_ids, attention_mask, positions, segment_ids, block_mask, mask_rule,
                           output_hidden_states, kv_cache)
        rule = mask_rule if mask_rule is not None else DocumentMask()
        batch, seq_len = input_ids.shape
        if positions is None:
            positions = default_positions(seq_len, attention_mask, segment_ids, input_ids.device)
        positions = positions.expand(batch, seq_len)
        document_ids = document_ids_for(attention_mask, segment_ids)
        wanted = tuple(output_hidden_states or ())
        shift = shift and self.shifts_outputs
        if kv_cache is not None and shift:
            raise ValueError("RotaryTransformer with shift_outputs=True cannot run on a KV cache: the first new "
                             "token's output is read from the cached token before it")
        if kv_cache is not None:  # the cache keeps each key's document and position, all that causal rules read
            new_tokens = Tokens(torch.zeros_like(positions) if document_ids is None else document_ids, positions)
            mask = rule.dense(new_tokens, kv_cache.key_tokens(new_tokens))
            x, hidden_states = _blocks(self, input_ids, positions, "sdpa", mask, wanted, kv_cache)
            if write_cache:
                kv_cache.append(new_tokens)
            return self.final_norm(x), hidden_states
        backend = self._forward_backend(input_ids.device, block_mask, segment_ids)
        if block_mask is not None:
            mask = block_mask
        elif backend == "flex" or self.config.compile:  # a few fixed shapes: compiled once per bucket
            padded_shape = bucket_shape(batch, seq_len)
            mask = build_attention_mask(backend, rule, document_ids, positions, padded_shape)
            input_ids, positions = pad_to(input_ids, padded_shape, 0), pad_to(positions, padded_shape, 0)
        else:
            mask = build_attention_mask(backend, rule, document_ids, positions)
        run_block = _compiled_block() if self.config.compile else _run_block
        x, hidden_states = _blocks(self, input_ids, positions, backend, mask, wanted, None, run_block)
        final = self.final_norm(x[:batch, :seq_len])
        if shift:
            final = read_from_previous_position(final, positions[:batch, :seq_len])
        return final, tuple(state[:batch, :seq_len] for state in hidden_states)

    def _check_inputs(
        self,
        input_ids: Tensor,
        attention_mask: Optional[Tensor],
        positions: Optional[Tensor],
        segment_ids: Optional[Tensor],
        block_mask: Optional[BlockMask],
        mask_rule: Optional[MaskRule],
        output_hidden_states: Optional[Sequence[int]],
        kv_cache: Optional[KVCache],
    ) -> None:
        """Refuse inconsistent arguments of :meth:`forward`, naming the offending one."""
        for name, tensor in (("attention_mask", attention_mask), ("positions", positions),
                             ("segment_ids", segment_ids)):
            if tensor is not None and tensor.shape != input_ids.shape:
                raise ValueError(f"RotaryTransformer.forward: {name} has shape {tuple(tensor.shape)}, "
                                 f"input_ids has {tuple(input_ids.shape)}")
        for index in output_hidden_states or ():
            if not 0 <= index < self.config.n_layers:
                raise ValueError(f"RotaryTransformer.forward: output_hidden_states index {index} is not a "
                                 f"block index in [0, {self.config.n_layers})")
        if block_mask is not None and (mask_rule is not None or kv_cache is not None):
            raise ValueError("RotaryTransformer.forward: block_mask replaces the mask rule; it cannot be "
                             "combined with mask_rule or kv_cache")
        if kv_cache is not None and positions is None:
            raise ValueError("RotaryTransformer.forward: kv_cache needs explicit positions for the new tokens")
        if kv_cache is not None and not (mask_rule is not None
                                         and (mask_rule.decodes_with_cache or mask_rule.reads_stale_cache)):
            raise ValueError(f"RotaryTransformer.forward: kv_cache needs a mask_rule that decodes with a cache "
                             f"(CausalMask, BlockCausalMask) or reads a stale one (StalePrefixMask), "
                             f"got {mask_rule!r}")


def _run_block(block: TransformerBlock, x: Tensor, cos: Tensor, sin: Tensor, backend: AttentionBackend,
               mask: AttentionMask, cache: Optional[CachedLayer]) -> Tensor:
    """One block's forward: what ``model.compile`` compiles (:func:`_compiled_block`)."""
    return block(x, cos, sin, backend, mask, cache)


def _blocks(
    model: RotaryTransformer,
    input_ids: Tensor,
    positions: Tensor,
    backend: AttentionBackend,
    mask: AttentionMask,
    wanted: tuple[int, ...],
    kv_cache: Optional[KVCache],
    run_block: Callable[..., Tensor] = _run_block,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Embedding and blocks, each block run by ``run_block``: the residual stream after the
    last block, and after each block in ``wanted`` (in that order)."""
    cos, sin = model.rotary(positions)
    x = model.dropout(model.token_embedding(input_ids))
    hidden_states = {}
    for index, block in enumerate(model.blocks):
        cache = kv_cache.layer(index) if kv_cache is not None else None
        x = run_block(block, x, cos, sin, backend, mask, cache)
        if index in wanted:
            hidden_states[index] = x
    return x, tuple(hidden_states[index] for index in wanted)


@functools.cache
def _compiled_block() -> Callable[..., Tensor]:
    """:func:`_run_block` compiled once per process (``model.compile``), the block a plain
    argument: every block of every model shares one compiled graph per shape bucket (its
    parameters are inputs of the graph, not constants), so compiling costs one block's time
    whatever the depth (compiling the whole stack unrolled every block into one graph:
    ``python scripts/bench_compile_time.py``)."""
    allow_shape_buckets()
    return torch.compile(_run_block, dynamic=False)


@contextlib.contextmanager
def backend_log_deferred(model: nn.Module) -> Iterator[None]:
    """Forwards of ``model``'s rotary transformers inside do not log their attention backend; the
    first forward after does (a check before a run starts stays out of its log)."""
    transformers = [module for module in model.modules() if isinstance(module, RotaryTransformer)]
    for transformer in transformers:
        transformer._quiet = True
    try:
        yield
    finally:
        for transformer in transformers:
            transformer._quiet = False
