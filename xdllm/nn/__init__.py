"""Neural-network building blocks: rotary embeddings, mask rules, attention backends, the KV
cache and the transformer."""

from xdllm.nn.attention import resolve_attention_backend
from xdllm.nn.kv_cache import KVCache
from xdllm.nn.masks import (
    PAD_DOCUMENT_ID,
    AnnealedCausalMask,
    BlockCausalMask,
    BlockDiffusionMask,
    CausalMask,
    DocumentMask,
    MaskRule,
    StalePrefixMask,
    Tokens,
)
from xdllm.nn.rotary import RotaryEmbedding, apply_rotary
from xdllm.nn.transformer import RotaryTransformer, RotaryTransformerConfig, TransformerOutput, default_positions

__all__ = [
    "PAD_DOCUMENT_ID",
    "AnnealedCausalMask",
    "BlockCausalMask",
    "BlockDiffusionMask",
    "CausalMask",
    "DocumentMask",
    "KVCache",
    "MaskRule",
    "RotaryEmbedding",
    "RotaryTransformer",
    "RotaryTransformerConfig",
    "StalePrefixMask",
    "Tokens",
    "TransformerOutput",
    "apply_rotary",
    "default_positions",
    "resolve_attention_backend",
]
