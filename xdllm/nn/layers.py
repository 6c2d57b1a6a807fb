"""The layers of :class:`~xdllm.nn.transformer.RotaryTransformer`: its config, and the
pre-norm block (rotary self-attention, MLP) it stacks ``n_layers`` times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from xdllm.nn.attention import AttentionBackend, AttentionMask, BackendRequest, attend, resolve_attention_backend
from xdllm.nn.kv_cache import CachedLayer
from xdllm.nn.rotary import apply_rotary


@dataclass(frozen=True)
class RotaryTransformerConfig:
    """Size and behaviour of a :class:`RotaryTransformer`. ``d_ff=None`` means ``4 * d_model``."""

    vocab_size: int
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: Optional[int] = None
    max_positions: int = 1024
    dropout: float = 0.0
    attn_backend: BackendRequest = "auto"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    compile: bool = False
    """``torch.compile`` the transformer block, one graph every block runs, once per shape bucket."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"RotaryTransformerConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"RotaryTransformerConfig: d_model={self.d_model} is not divisible "
                             f"by n_heads={self.n_heads}")
        if (self.d_model // self.n_heads) % 2 != 0:
            raise ValueError(f"RotaryTransformerConfig: head dim d_model/n_heads="
                             f"{self.d_model // self.n_heads} must be even for RoPE")
        if self.d_ff is not None and self.d_ff < 1:
            raise ValueError(f"RotaryTransformerConfig.d_ff must be >= 1 or None, got {self.d_ff}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"RotaryTransformerConfig.dropout must be in [0, 1), got {self.dropout}")
        if not isinstance(self.compile, bool):
            raise ValueError(f"RotaryTransformerConfig.compile must be true or false, got {self.compile!r}")
        if self.norm not in ("rmsnorm", "layernorm"):
            raise ValueError(f"RotaryTransformerConfig.norm must be 'rmsnorm' or 'layernorm', got {self.norm!r}")
        resolve_attention_backend(self.attn_backend, torch.device("cpu"))  # validates the name

    @property
    def ff_dim(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model


def make_norm(config: RotaryTransformerConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model)
    return nn.LayerNorm(config.d_model, bias=False)


class SelfAttention(nn.Module):
    """Multi-head self-attention with rotary queries and keys; with a cache, the keys and values
    are the cached prefix's followed by the new tokens'."""

    def __init__(self, config: RotaryTransformerConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.out = nn.Linear(config.d_model, config.d_model, bias=False)

    def forward(
        self,
        x: Float[Tensor, "batch seq_len d_model"],
        cos: Float[Tensor, "batch seq_len head_dim"],
        sin: Float[Tensor, "batch seq_len head_dim"],
        backend: AttentionBackend,
        mask: AttentionMask,
        cache: Optional[CachedLayer] = None,
    ) -> Float[Tensor, "batch seq_len d_model"]:
        batch, seq_len, d_model = x.shape
        heads = self.qkv(x).view(batch, seq_len, 3, self.n_heads, d_model // self.n_heads)
        query, key, value = heads.permute(2, 0, 3, 1, 4).unbind(0)  # each [batch, heads, L, head_dim]
        query, key = apply_rotary(query, cos, sin), apply_rotary(key, cos, sin)
        if cache is not None:
            key, value = cache.extend(key, value)
        mixed = attend(query, key, value, backend, mask)
        return self.out(mixed.transpose(1, 2).reshape(batch, seq_len, d_model))


class MLP(nn.Module):
    def __init__(self, config: RotaryTransformerConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.d_model, config.ff_dim, bias=False)
        self.down = nn.Linear(config.ff_dim, config.d_model, bias=False)

    def forward(self, x: Float[Tensor, "batch seq_len d_model"]) -> Float[Tensor, "batch seq_len d_model"]:
        return self.down(F.gelu(self.up(x)))


class TransformerBlock(nn.Module):
    """Pre-norm residual block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, config: RotaryTransformerConfig) -> None:
        super().__init__()
        self.attention_norm = make_norm(config)
        self.attention = SelfAttention(config)
        self.mlp_norm = make_norm(config)
        self.mlp = MLP(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Float[Tensor, "batch seq_len d_model"],
        cos: Float[Tensor, "batch seq_len head_dim"],
        sin: Float[Tensor, "batch seq_len head_dim"],
        backend: AttentionBackend,
        mask: AttentionMask,
        cache: Optional[CachedLayer] = None,
    ) -> Float[Tensor, "batch seq_len d_model"]:
        x = x + self.dropout(self.attention(self.attention_norm(x), cos, sin, backend, mask, cache))
        return x + self.dropout(self.mlp(self.mlp_norm(x)))
