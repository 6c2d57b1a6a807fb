"""A key/value cache for causal and block-causal decoding with explicit positions.

Each layer has preallocated ``[batch, heads, max_len, head_dim]`` key and value buffers. One fill
length, :attr:`KVCache.length`, is shared by the whole batch: every forward appends the same
number of slots to every row. Rows that are shorter (left-padded prompts, say) fill their extra
slots with padding, and the cache remembers each slot's document id and position: padding
slots carry :data:`PAD_DOCUMENT_ID`, which is the key-validity mask, so real tokens never
attend to them. The positions are the keys' side of the mask rule (their RoPE rotation is
already applied to the cached keys).

A forward either appends (its keys and values are written after the prefix and ``length``
grows) or only reads (it attends to the prefix and to itself, and leaves the prefix and
``length`` as they were): block diffusion denoises a block several times reading the cache, then
appends the final clean block once. A reading forward still puts its keys and values in the free
slots after the prefix, so that attention reads one contiguous view of the buffers instead of a
copy of the whole prefix joined to the new block; those slots stay free, and the next forward
overwrites them.

A cache may also keep a *suffix* (:meth:`KVCache.truncate` with ``keep_from``): slots after a
gap that reading forwards fill exactly, so that their tokens attend to the prefix, to each
other and to the kept suffix, still one contiguous view (the predictor's approximate dual cache,
:mod:`xdllm.predict.prefix_cache`). There :attr:`KVCache.write_only` lets each row write the new
keys and values of some slots only and keep what the others hold (each row keeping its own), and
:meth:`KVCache.take_rows` and :meth:`KVCache.put_rows` run some rows apart from the others.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional

import torch
from jaxtyping import Float, Integer
from torch import Tensor

from xdllm.nn.masks import PAD_DOCUMENT_ID, Tokens


class KVCache:
    """Cached keys, values, document ids and positions of a prefix; see the module docstring."""

    def __init__(
        self,
        n_layers: int,
        batch_size: int,
        n_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: Optional[torch.device] = None,
    ) -> None:
        shape = (batch_size, n_heads, max_len, head_dim)
        self.keys = tuple(torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers))
        self.values = tuple(torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers))
        self.document = torch.full((batch_size, max_len), PAD_DOCUMENT_ID, dtype=torch.long, device=device)
        self.position = torch.zeros((batch_size, max_len), dtype=torch.long, device=device)
        self.batch_size = batch_size
        self.max_len = max_len
        self.length = 0
        self.filled = 0  # the slots the last append filled: truncate may keep any of them
        self.suffix: tuple[int, int] | None = None
        self.write_only: Tensor | None = None
        """``[batch, new_len]``: where set, a forward writes the new keys and values of these slots
        only and reads the ones already there elsewhere (rows keeping their own keys)."""

    def reset(self) -> None:
        """Forget the prefix and any kept suffix (the buffers are kept and overwritten)."""
        self.length = 0
        self.filled = 0
        self.suffix = None

    def truncate(self, length: int, keep_from: int | None = None) -> None:
        """Keep the first ``length`` slots as the prefix; with ``keep_from``, also keep the slots
        from ``keep_from`` to the fill length as a suffix, which every later forward's new tokens
        must fill the gap before (``length .. keep_from``) and then attend to."""
        filled = self.filled
        if not 0 <= length <= filled:
            raise ValueError(f"KVCache.truncate: length {length} is outside 0..{filled} (the fill length)")
        if keep_from is not None and not length <= keep_from <= filled:
            raise ValueError(f"KVCache.truncate: keep_from {keep_from} is outside {length}..{filled}")
        self.length = length
        self.suffix = None if keep_from is None or keep_from == filled else (keep_from, filled)

    def take_rows(self, index: Integer[Tensor, " rows"]) -> KVCache:
        """A cache of the rows ``index`` (in that order): copies of their buffers, with this
        cache's fill length and kept suffix (rows of a batch that finished leave a cache, rows
        that run apart from the others take theirs)."""
        taken = copy.copy(self)
        taken.keys = tuple(keys.index_select(0, index) for keys in self.keys)
        taken.values = tuple(values.index_select(0, index) for values in self.values)
        taken.document = self.document.index_select(0, index)
        taken.position = self.position.index_select(0, index)
        taken.batch_size = index.shape[0]
        return taken

    def put_rows(self, index: Integer[Tensor, " rows"], rows: KVCache) -> None:
        """Write the buffers of ``rows`` (a :meth:`take_rows` cache, run since) back at ``index``;
        the fill length becomes theirs."""
        for mine, theirs in zip((*self.keys, *self.values), (*rows.keys, *rows.values)):
            mine.index_copy_(0, index, theirs)
        self.document.index_copy_(0, index, rows.document)
        self.position.index_copy_(0, index, rows.position)
        self.length, self.filled, self.suffix = rows.length, rows.filled, rows.suffix

    def key_tokens(self, new: Tokens) -> Tokens:
        """Document ids and positions of the keys a forward of ``new`` tokens attends to: the
        cached prefix followed by the new tokens themselves."""
        batch, new_len = new.document.shape
        if batch != self.batch_size:
            raise ValueError(f"KVCache: batch of {batch} rows, the cache holds {self.batch_size}")
        if self.length + new_len > self.max_len:
            raise ValueError(f"KVCache: {self.length} cached + {new_len} new tokens exceed max_len={self.max_len}")
        if self.suffix is None:
            return Tokens(torch.cat([self.document[:, :self.length], new.document], dim=1),
                          torch.cat([self.position[:, :self.length], new.position], dim=1))
        start, end = self.suffix
        if self.length + new_len != start:
            raise ValueError(f"KVCache: {new_len} new tokens after {self.length} cached leave a gap before the "
                             f"kept suffix at slot {start}: they must fill slots {self.length}..{start} exactly")
        return Tokens(torch.cat([self.document[:, :self.length], new.document, self.document[:, start:end]], dim=1),
                      torch.cat([self.position[:, :self.length], new.position, self.position[:, start:end]], dim=1))

    def layer(self, index: int) -> CachedLayer:
        """The view one transformer layer uses to extend its keys and values. A layer writes the
        same way whether its forward appends or only reads: what differs is whether
        :meth:`append` then grows the fill length."""
        return CachedLayer(self, index)

    def append(self, new: Tokens) -> None:
        """Record the new tokens' ids and positions and grow ``length`` (after every layer wrote)."""
        if self.suffix is not None:
            raise ValueError("KVCache.append: the cache keeps a suffix, which appended tokens would overwrite; "
                             "read it (write_cache=False) or reset it")
        end = self.length + new.document.shape[1]
        self.document[:, self.length:end] = new.document
        self.position[:, self.length:end] = new.position
        self.length = self.filled = end


@dataclass(frozen=True)
class CachedLayer:
    """One layer's keys and values in a :class:`KVCache`."""

    cache: KVCache
    index: int

    def extend(
        self,
        key: Float[Tensor, "batch heads new_len head_dim"],
        value: Float[Tensor, "batch heads new_len head_dim"],
    ) -> tuple[Float[Tensor, "batch heads kv_len head_dim"], Float[Tensor, "batch heads kv_len head_dim"]]:
        """The cached keys and values followed by the new ones (and the kept suffix, if any), a
        view of the cache's buffers: the new ones are written into the free slots after the prefix;
        the fill length only grows in :meth:`KVCache.append`, which a reading forward never calls."""
        start = self.cache.length
        cached_keys, cached_values = self.cache.keys[self.index], self.cache.values[self.index]
        end = start + key.shape[2]
        if self.cache.write_only is not None:  # elsewhere the slots keep what they hold
            kept = ~self.cache.write_only[:, None, :, None]
            key = torch.where(kept, cached_keys[:, :, start:end], key)
            value = torch.where(kept, cached_values[:, :, start:end], value)
        cached_keys[:, :, start:end] = key
        cached_values[:, :, start:end] = value
        if self.cache.suffix is not None:
            end = self.cache.suffix[1]
        return cached_keys[:, :, :end], cached_values[:, :, :end]

