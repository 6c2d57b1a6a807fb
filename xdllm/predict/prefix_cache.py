"""An approximate prefix cache for the unmasking predictor (``prefix_cache=true``).

A bidirectional denoiser recomputes the whole canvas at every step, though the prompt never
changes and, with blocks, the finished blocks no longer change either. Fast-dLLM (Wu et al.,
2025) keeps the keys and values of that prefix from one full forward and, until the next
refresh, runs only the columns after it, which attend to the kept prefix and to each other. The
kept keys are *stale*: they were computed before the tokens written since, which a bidirectional
prefix would have attended to. So the outputs can differ from recomputing everything; how much
is measured, not assumed (``docs/predictor.md``).

Every row keeps its own keys, so that the batch a row is in never changes what it decodes. A
row's *own span* is the columns from its current block's start to the end of the canvas (without
``block_size`` the block is the whole output region, so the prefix is the prompt and never
moves; with ``dual``, Fast-dLLM's dual cache, to its current block's end: the columns after it
are masks, still to be decoded, whose keys are kept too). A row refreshes (takes the keys and
values of a full forward for every column) at its first step, whenever its own span moves (its
block moves on), when it runs again after steps without a forward pass (MDLM's ReMDM and
ancestral samplers run only the rows that reveal) and, with ``refresh_every = N``, at the latest
N steps after its last refresh (staler keys cost more accuracy: the trade is measured in
``docs/predictor.md``). Between its refreshes a step writes the keys and values of its own span
only, attending to the ones it kept everywhere else.

At a step the rows due run the whole canvas in a cache of their own, whose keys replace theirs
(``KVCache.put_rows``); the others run the columns spanning their own spans, each writing its
own span's keys only (a masked write, ``KVCache.write_only``, skipped when their spans are the
same and no row is due; the rows due ride along writing nothing, so that no copy of the others'
keys is made). Rows that finish leave the cache (``KVCache.take_rows``).
Window columns outside a row's own span keep the outputs of its last refresh: no step writes
them (except padding after a settled EOS, whose kept keys stay those of the masks until the
row's next refresh), and the history's top-k there shows those.

Needs rows whose output regions start at the same column (continuation of left-padded prompts,
how ``xdllm generate`` batches them) and a model with ``final_hidden`` (taking ``mask_rule``,
``kv_cache`` and ``write_cache``), ``lm_head_weight`` and ``new_kv_cache``, as the MLM and MDLM
models have. A model with shifted outputs (``model.shift_outputs=true``: column ``j``'s logits
from the state at ``j - 1``, the layout of a network started from an AR run) also needs
``final_hidden(unshifted=True)``: a step then also runs the column before the ones it writes
(its key not kept), so that the first of them reads a state computed at this step.
"""

from __future__ import annotations

import inspect

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn

from xdllm.nn.kv_cache import KVCache
from xdllm.nn.masks import StalePrefixMask
from xdllm.nn.shifted_outputs import read_from_previous_position

REQUIRED_METHODS = ("final_hidden", "lm_head_weight", "new_kv_cache")


def check_prefix_cache_model(model: nn.Module) -> None:
    """Refuse a model that cannot run a forward over a cached prefix, naming what it lacks."""
    missing = [name for name in REQUIRED_METHODS if not hasattr(model, name)]
    if missing:
        raise ValueError(f"prefix_cache=true needs a model with {', '.join(REQUIRED_METHODS)}; "
                         f"{type(model).__name__} has no {', '.join(missing)}")
    if _shifts(model) and "unshifted" not in inspect.signature(model.final_hidden).parameters:
        raise ValueError(f"prefix_cache=true with a model that shifts its outputs needs its final_hidden to take "
                         f"unshifted=True (its own final states, which the cache moves itself); "
                         f"{type(model).__name__}.final_hidden does not")


def _shifts(model: nn.Module) -> bool:
    """Whether position ``j``'s logits come from the final state at ``j - 1`` (``shift_outputs``)."""
    return bool(getattr(model, "shifts_outputs", False))


class PrefixCache:
    """The prefix keys and values of one ``predict`` call; see the module docstring.

    ``window_start``: the column where every row's output region starts; ``block_size``: the
    predictor's (None: the region is one block); ``refresh_every``: most steps between a row's
    refreshes (None: refresh a row only when its kept columns change); ``dual``: also keep the
    columns after the current block (needs ``block_size``). Each row keeps its own keys (the
    module docstring).
    """

    def __init__(self, window_start: int, block_size: int | None, mask_token_id: int,
                 refresh_every: int | None = None, dual: bool = False) -> None:
        if dual and block_size is None:
            raise ValueError("a dual cache keeps the columns after the current block: it needs block_size")
        self.window_start = window_start
        self.block_size = block_size
        self.mask_token_id = mask_token_id
        self.refresh_every = refresh_every
        self.dual = dual
        self._cache: KVCache | None = None
        self._window_hidden: Tensor | None = None  # per cached row, the window's final states
        self._cached: Tensor | None = None  # which rows of the batch the cache holds (those that ran last)
        # per row of the batch: its own span at its last refresh (window offsets), steps since then
        self._kept_span: Tensor | None = None
        self._since: Tensor | None = None
        # what poll found for window_logits: per row of the batch, its own span and whether it is
        # due; how many running rows are due; whether the others share one span; where the
        # running rows sit among the cached ones
        self._own: Tensor | None = None
        self._due: Tensor | None = None
        self._due_rows = 0
        self._in_step = True
        self._kept_rows: Tensor | None = None

    def poll(self, unfinished: Bool[Tensor, " batch"], ids: Integer[Tensor, "batch seq_len"]
             ) -> tuple[Integer[Tensor, " active"], tuple[int, int]]:
        """The rows that run this step and the columns the rows that do not refresh run, ``(start,
        stop)``: every such row's own span; read from the device in one host sync (the step's
        only one, as without the cache)."""
        window = ids[:, self.window_start:]
        rows, width = window.shape
        offsets = torch.arange(width, device=ids.device)
        if self.block_size is None:
            block_start = torch.zeros(rows, dtype=torch.long, device=ids.device)
        else:
            first_mask = torch.where(window == self.mask_token_id, offsets, width).min(1).values
            block_start = first_mask // self.block_size * self.block_size
        block_stop = (block_start + self.block_size).clamp(max=width) if self.dual else torch.full_like(
            block_start, width)
        own = torch.stack([block_start, block_stop], dim=1)
        if self._kept_span is None:
            self._kept_span, self._since = torch.full_like(own, -1), torch.zeros_like(block_start)
            self._cached = torch.zeros_like(unfinished)
        previous = self._cached
        came = unfinished & ~previous
        due = came | (own != self._kept_span).any(1)
        if self.refresh_every is not None:
            due = due | (self._since >= self.refresh_every)
        due = due & unfinished
        # the rows that step (run, not due) span the columns from the earliest of their blocks to
        # the end (with dual: to the end of the latest); a row that does not step never holds that
        # span back
        stepping = unfinished & ~due
        start = torch.cat([torch.where(stepping, block_start, width), offsets.new_full((1,), width)]).amin()
        stop = torch.cat([torch.where(stepping, block_stop, 0), offsets.new_zeros(1)]).amax()
        # stepping rows in step (every one's own span is that span): each writes every column run
        in_step = ((block_start == start) & (block_stop == stop) | ~stepping).all()
        moved = (came | (previous & ~unfinished)).any()
        running, start, stop, due_rows, moved, in_step = torch.stack(
            [unfinished.sum(), start, stop, due.sum(), moved, in_step]).tolist()
        # the running rows in order, found on the device: a host list copied over would sync again
        active = torch.argsort((~unfinished).to(torch.uint8), stable=True)[:running]
        # where each sits among the cached rows (a row that joins them: anywhere, it is due)
        self._kept_rows = (previous.cumsum(0) - 1).clamp(min=0).index_select(0, active) if moved else None
        self._cached, self._own, self._due = unfinished, own, due
        self._due_rows, self._in_step = int(due_rows), bool(in_step)
        return active, (self.window_start + start, self.window_start + stop)

    def window_logits(self, model: nn.Module, ids: Integer[Tensor, "rows seq_len"],
                      attention_mask: Bool[Tensor, "rows seq_len"], positions: Integer[Tensor, "rows seq_len"],
                      span: tuple[int, int], active: Integer[Tensor, " rows"]) -> Float[Tensor, "rows region vocab"]:
        """The logits of the running rows' (``active``) output windows: the rows due refresh (a
        forward of the whole canvas, whose keys and values they keep), the others step (a forward
        of the columns in ``span``, each keeping those of its own span): one forward each.

        A model with shifted outputs reads column ``j``'s logits from the state at ``j - 1``, so
        for it a step also runs the column before a row's own span (its key is fresh too) and the
        cache moves the states itself (``final_hidden(unshifted=True)``)."""
        assert self._own is not None and self._due is not None and self._since is not None
        if self._cache is not None and self._kept_rows is not None:  # rows left or joined the cached ones
            assert self._window_hidden is not None
            self._cache = self._cache.take_rows(self._kept_rows)
            self._window_hidden = self._window_hidden.index_select(0, self._kept_rows)
        rows = ids.shape[0]
        own = self._own.index_select(0, active)
        if self._cache is None or self._due_rows == rows:
            if self._cache is None:
                self._cache = model.new_kv_cache(rows, ids.shape[1])
            self._window_hidden = self._refreshed(model, self._cache, ids, attention_mask, positions)
        elif self._due_rows == 0:
            assert self._window_hidden is not None
            self._window_hidden = self._stepped(model, self._cache, (ids, attention_mask, positions), span, own,
                                                self._window_hidden)
        else:  # the rows due refresh apart, in a cache of their own; the others run their spans only
            assert self._window_hidden is not None
            due = self._due.index_select(0, active)
            refreshing = torch.argsort((~due).to(torch.uint8), stable=True)[:self._due_rows]
            stepped = self._stepped(model, self._cache, (ids, attention_mask, positions), span, own,
                                    self._window_hidden, skip=due)
            refreshed_cache = model.new_kv_cache(self._due_rows, ids.shape[1])
            refreshed = self._refreshed(model, refreshed_cache, ids[refreshing], attention_mask[refreshing],
                                        positions[refreshing])
            self._cache.put_rows(refreshing, refreshed_cache)
            self._window_hidden = stepped.index_copy(0, refreshing, refreshed)
        self._kept_span = torch.where(self._due[:, None], self._own, self._kept_span)
        self._since = torch.where(self._due, 1, self._since + 1)
        return torch.nn.functional.linear(self._window_hidden, model.lm_head_weight)

    def _refreshed(self, model: nn.Module, cache: KVCache, ids: Tensor, attention_mask: Tensor,
                   positions: Tensor) -> Tensor:
        """A forward of the whole canvas whose keys and values ``cache`` keeps: the window's
        final states."""
        shifted = _shifts(model)
        cache.reset()
        hidden = model.final_hidden(ids, attention_mask=attention_mask, positions=positions, kv_cache=cache,
                                    **_options(shifted))
        return (read_from_previous_position(hidden, positions) if shifted else hidden)[:, self.window_start:]

    def _stepped(self, model: nn.Module, cache: KVCache, inputs: tuple[Tensor, Tensor, Tensor], span: tuple[int, int],
                 own: Tensor, kept: Tensor, skip: Tensor | None = None) -> Tensor:
        """A forward of the columns in ``span`` over ``cache``'s kept keys, each row writing the
        keys and values of its ``own`` span only (all of them when the rows are in step; none for
        the rows ``skip`` marks, which refresh apart): the window's final states, this step's in
        each row's own span and ``kept`` elsewhere."""
        ids, attention_mask, positions = inputs
        shifted = _shifts(model)
        start, stop = span
        first = max(start - 1, 0) if shifted else start
        fresh = None
        cache.truncate(first, keep_from=stop)
        if not self._in_step or skip is not None:
            columns = torch.arange(ids.shape[1], device=ids.device) - self.window_start  # window offsets
            fresh = (columns >= own[:, :1]) & (columns < own[:, 1:])  # [rows, canvas]: each row's own span
            if skip is not None:
                fresh = fresh & ~skip[:, None]
            written = fresh | (columns == own[:, :1] - 1) & fresh.any(1, keepdim=True) if shifted else fresh
            cache.write_only = written[:, first:stop]
        try:
            ran = model.final_hidden(ids[:, first:stop], attention_mask=attention_mask[:, first:stop],
                                     positions=positions[:, first:stop], kv_cache=cache, write_cache=False,
                                     **_options(shifted))
        finally:
            cache.write_only = None
        if shifted:
            ran = read_from_previous_position(ran, positions[:, first:stop])
        placed = torch.cat([kept[:, :start - self.window_start], ran[:, start - first:],
                            kept[:, stop - self.window_start:]], dim=1)
        return placed if fresh is None else torch.where(fresh[:, self.window_start:, None], placed, kept)


def _options(shifted: bool) -> dict[str, object]:
    """``final_hidden``'s options for a forward over kept keys."""
    return {"mask_rule": StalePrefixMask(), **({"unshifted": True} if shifted else {})}
