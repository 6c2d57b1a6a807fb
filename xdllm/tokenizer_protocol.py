"""What xdllm needs from a tokenizer, apart from :mod:`xdllm.interfaces` (which re-exports it)
so that the tokenizers and ``xdllm tokenizer`` load without torch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    """What xdllm needs from a tokenizer (built-in or a local Hugging Face JSON)."""

    pad_token_id: int
    mask_token_id: int
    bos_token_id: int
    eos_token_id: int

    @property
    def vocab_size(self) -> int: ...

    @property
    def special_token_ids(self) -> frozenset[int]: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...

    def id_to_token(self, token_id: int) -> str: ...
