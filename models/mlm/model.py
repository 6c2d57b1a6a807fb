"""The MLM denoiser: a bidirectional rotary transformer from canvas to per-position logits."""

from __future__ import annotations

from typing import Literal, Optional

from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn
from torch.nn.attention.flex_attention import BlockMask

from xdllm.nn import KVCache, MaskRule, RotaryTransformer, RotaryTransformerConfig
from xdllm.nn.attention import BackendRequest


class RotaryTransformerMLMModel(nn.Module):
    """The MLM denoiser: maps a (partly masked) canvas ``x_t`` to logits ``[batch, L, vocab]``.

    ``attn_backend``: ``"auto"`` (FlexAttention on CUDA, SDPA elsewhere), ``"sdpa"`` or
    ``"flex"`` (CPU only for inference). See :mod:`xdllm.nn.attention`. ``norm``:
    ``"rmsnorm"`` or ``"layernorm"``. ``compile``: ``torch.compile`` the network (``model.compile=true``).
    ``shift_outputs``: position ``j``'s logits come from the final state at ``j - 1`` (an
    autoregressive network's layout, for starting from an ``arlm`` run's weights; see
    :mod:`xdllm.nn.shifted_outputs`).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 128,
        n_layers: int = 4,
        n_heads: int = 4,
        d_ff: Optional[int] = None,
        max_positions: int = 1024,
        dropout: float = 0.0,
        attn_backend: BackendRequest = "auto",
        norm: Literal["rmsnorm", "layernorm"] = "rmsnorm",
        compile: bool = False,
        shift_outputs: bool = False,
    ) -> None:
        super().__init__()
        self.config = RotaryTransformerConfig(
            vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_ff=d_ff,
            max_positions=max_positions, dropout=dropout, attn_backend=attn_backend, norm=norm,
            compile=compile,
        )
        self.transformer = RotaryTransformer(self.config, shift_outputs=shift_outputs)

    def forward(
        self,
        x_t: Integer[Tensor, "batch seq_len"],
        attention_mask: Optional[Bool[Tensor, "batch seq_len"]] = None,
        positions: Optional[Integer[Tensor, "batch seq_len"]] = None,
        block_mask: Optional[BlockMask] = None,
        segment_ids: Optional[Integer[Tensor, "batch seq_len"]] = None,
        *,
        mask_rule: Optional[MaskRule] = None,
    ) -> Float[Tensor, "batch seq_len vocab"]:
        """Logits for every canvas position.

        ``attention_mask``: True on real tokens (padding is never attended by them).
        ``positions``: RoPE positions; default ``arange``, or ``cumsum(attention_mask) - 1``
        clamped at 0 (left padding does not shift a prompt), restarting per segment when
        ``segment_ids`` are given. ``segment_ids``: packed documents, attention stays inside a
        segment; padding must carry an id of its own (``PackedMLMCollator`` uses -1).
        ``block_mask``: a prebuilt FlexAttention mask (normally left None: the model builds
        one from ``segment_ids`` on its own device). ``mask_rule``: who attends to whom inside a
        document (default bidirectional; the loss passes the annealed rule while training
        anneals attention, :mod:`xdllm.collate.attention_annealing`).
        """
        return self.transformer(x_t, attention_mask=attention_mask, positions=positions,
                                segment_ids=segment_ids, block_mask=block_mask, mask_rule=mask_rule)

    def final_hidden(
        self,
        x_t: Integer[Tensor, "batch seq_len"],
        attention_mask: Optional[Bool[Tensor, "batch seq_len"]] = None,
        positions: Optional[Integer[Tensor, "batch seq_len"]] = None,
        segment_ids: Optional[Integer[Tensor, "batch seq_len"]] = None,
        *,
        mask_rule: Optional[MaskRule] = None,
        kv_cache: Optional[KVCache] = None,
        write_cache: bool = True,
        unshifted: bool = False,
    ) -> Float[Tensor, "batch seq_len d_model"]:
        """What the LM head reads (:meth:`forward` without the projection to the vocabulary);
        ``mask_rule``, ``kv_cache``, ``write_cache`` and ``unshifted`` as in
        :meth:`~xdllm.nn.RotaryTransformer.final_hidden` (the predictor's ``prefix_cache``)."""
        return self.transformer.final_hidden(x_t, attention_mask=attention_mask, positions=positions,
                                             segment_ids=segment_ids, mask_rule=mask_rule,
                                             kv_cache=kv_cache, write_cache=write_cache, unshifted=unshifted)

    def new_kv_cache(self, batch_size: int, max_len: int) -> KVCache:
        """An empty key/value cache for this network (:meth:`~xdllm.nn.RotaryTransformer.new_kv_cache`)."""
        return self.transformer.new_kv_cache(batch_size, max_len)

    @property
    def shifts_outputs(self) -> bool:
        """Whether position ``j``'s logits come from the final state at ``j - 1``."""
        return self.transformer.shifts_outputs

    @property
    def lm_head_weight(self) -> Float[Tensor, "vocab d_model"]:
        return self.transformer.lm_head.weight
