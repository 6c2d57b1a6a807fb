"""The hybrid's training mask over a row ``[x_t | x_0]``: block diffusion beside a causal LM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import no_type_check

import torch
from torch import Tensor

from xdllm.nn.masks import BlockDiffusionMask, BlockDiffusionTokens


@dataclass(frozen=True)
class HybridTrainingMask(BlockDiffusionMask):
    """:class:`~xdllm.nn.BlockDiffusionMask` with a token-causal clean half.

    A noisy token of block ``b`` sees the noisy tokens of block ``b`` and the clean tokens of
    blocks ``< b`` (the diffusion branch); a clean token sees the clean tokens at positions up to
    its own (the causal branch, exactly :class:`~xdllm.nn.CausalMask` over ``x_0``). The clean
    keys a noisy block sees are therefore the keys a causal KV cache holds when that block is
    decoded after them. Blocks are ``position // block_size``.
    """

    @no_type_check
    def allows(self, query: BlockDiffusionTokens, key: BlockDiffusionTokens) -> Tensor:
        query_block = query.position // self.block_size
        key_block = key.position // self.block_size
        noisy_query_sees = torch.where(key.clean, key_block < query_block, key_block == query_block)
        clean_query_sees = key.clean & (key.position <= query.position)
        return (query.document == key.document) & torch.where(query.clean, clean_query_sees, noisy_query_sees)
