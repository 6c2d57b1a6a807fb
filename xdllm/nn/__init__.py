"""Neural-network building blocks: rotary embeddings, attention backends, the transformer."""

from xdllm.nn.attention import PAD_DOCUMENT_ID, resolve_attention_backend
from xdllm.nn.rotary import RotaryEmbedding, apply_rotary
from xdllm.nn.transformer import RotaryTransformer, RotaryTransformerConfig, default_positions

__all__ = [
    "PAD_DOCUMENT_ID",
    "RotaryEmbedding",
    "RotaryTransformer",
    "RotaryTransformerConfig",
    "apply_rotary",
    "default_positions",
    "resolve_attention_backend",
]
