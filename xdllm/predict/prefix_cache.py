"""An approximate prefix cache for the unmasking predictor (``prefix_cache=true``).

A bidirectional denoiser recomputes the whole canvas at every step, though the prompt never
changes and, with blocks, the finished blocks no longer change either. Fast-dLLM (Wu et al.,
2025) keeps the keys and values of that prefix from one full forward and, until the next
refresh, runs only the columns after it, which attend to the kept prefix and to each other. The
kept keys are *stale*: they were computed before the tokens written since, which a bidirectional
prefix would have attended to. So the outputs can differ from recomputing everything; how much
is measured, not assumed (``docs/predictor.md``).

A refresh (a full forward whose prefix keys are kept) happens at the first step, whenever the
earliest current block among the running rows moves on (with ``block_size``; without it the
prefix is the prompt and never moves), whenever a row joins the running ones (with MDLM's ReMDM
sampler a row needs no forward pass at some steps; the cache holds the running rows only) and,
with ``refresh_every = N``, at the latest N steps after the last refresh (staler keys cost more
accuracy: the trade is measured in ``docs/predictor.md``). Rows that finish only leave the
cache: the others keep their keys, as they would alone. The prefix is the columns before the
earliest current block of the running rows, so every column a step may write lies after it.

With ``dual`` (Fast-dLLM's dual cache, with ``block_size``) the refresh also keeps the keys and
values of the columns after the latest current block of the running rows (masks, still to be
decoded), and a step between refreshes runs only the current blocks' columns, attending to the
kept prefix, to each other and to the kept suffix. A refresh then also happens when that suffix
moves.

Between refreshes the window columns outside what a step runs (earlier blocks; with ``dual``
the later ones too) keep the outputs of the last refresh: no step writes them (except padding
after a settled EOS, whose kept keys stay those of the masks until the next refresh), and the
history's top-k there shows those.

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
    predictor's (None: the region is one block); ``refresh_every``: most steps between refreshes
    (None: refresh only when the kept columns or the running rows change); ``dual``: also keep
    the columns after the current blocks (needs ``block_size``).
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
        self._steps_since_refresh = 0
        self._cache: KVCache | None = None
        self._rows = -1
        self._running: Tensor | None = None
        self._rows_came = True
        self._kept_rows: Tensor | None = None
        self._span = (-1, -1)
        self._window_hidden: Tensor | None = None

    def poll(self, unfinished: Bool[Tensor, " batch"], ids: Integer[Tensor, "batch seq_len"]
             ) -> tuple[Integer[Tensor, " active"], tuple[int, int]]:
        """The rows that still run and the columns a step between refreshes runs, ``(start,
        stop)``: from the earliest current block of the running rows to the end of the canvas
        (with ``dual``: to the end of the latest current block); read from the device in one host
        sync (the step's only one, as without the cache)."""
        window = ids[:, self.window_start:]
        width = window.shape[1]
        offsets = torch.arange(width, device=ids.device)
        if self.block_size is None:
            block_start = torch.zeros(ids.shape[0], dtype=torch.long, device=ids.device)
        else:
            first_mask = torch.where(window == self.mask_token_id, offsets, width).min(1).values
            block_start = first_mask // self.block_size * self.block_size
        # a row that no longer runs counts as past the end (before the start), so it never holds
        # the prefix (the suffix) back
        start = torch.cat([torch.where(unfinished, block_start, width), offsets.new_full((1,), width)]).amin()
        if self.dual:
            block_end = (block_start + self.block_size).clamp(max=width)
            stop = torch.cat([torch.where(unfinished, block_end, 0), offsets.new_zeros(1)]).amax()
        else:
            stop = offsets.new_full((), width)  # a fill on the device: new_tensor would copy from the host and wait
        # the cache holds the rows that ran last: a row that joins them needs a refresh; rows that
        # leave them only leave the cache
        previous = ~unfinished if self._running is None else self._running
        running, start, stop, came, gone = torch.stack([unfinished.sum(), start, stop, (unfinished & ~previous).any(),
                                                        (previous & ~unfinished).any()]).tolist()
        self._running, self._rows_came = unfinished, bool(came)
        # the running rows in order, found on the device: a host list copied over would sync again
        active = torch.argsort((~unfinished).to(torch.uint8), stable=True)[:running]
        # where each of them sits among the rows the cache holds (those that ran last, in order)
        self._kept_rows = (previous.cumsum(0) - 1).index_select(0, active) if gone and not came else None
        return active, (self.window_start + start, self.window_start + stop)

    def window_logits(self, model: nn.Module, ids: Integer[Tensor, "rows seq_len"],
                      attention_mask: Bool[Tensor, "rows seq_len"], positions: Integer[Tensor, "rows seq_len"],
                      span: tuple[int, int]) -> Float[Tensor, "rows region vocab"]:
        """The logits of the running rows' output windows: when a refresh is due, a full forward
        that keeps the keys and values outside ``span`` (the columns before it; with ``dual``
        those after it too); else a forward of the columns in ``span`` over the kept ones.

        A model with shifted outputs reads column ``j``'s logits from the state at ``j - 1``, so
        for it a step also runs the column before ``span`` (its key is not kept) and the cache
        moves the states itself (``final_hidden(unshifted=True)``)."""
        rows = ids.shape[0]
        start, stop = span
        shifted = _shifts(model)
        first = max(start - 1, 0) if shifted else start
        options = {"mask_rule": StalePrefixMask(), **({"unshifted": True} if shifted else {})}
        due = self.refresh_every is not None and self._steps_since_refresh >= self.refresh_every
        if self._cache is None or self._rows_came or span != self._span or due:
            if self._cache is not None and rows == self._rows:
                cache = self._cache  # the same rows: its buffers are overwritten
                cache.reset()
            else:
                cache = model.new_kv_cache(rows, ids.shape[1])
            hidden = model.final_hidden(ids, attention_mask=attention_mask, positions=positions, kv_cache=cache,
                                        **options)
            if shifted:
                hidden = read_from_previous_position(hidden, positions)
            cache.truncate(first, keep_from=stop)
            self._cache, self._rows, self._span = cache, rows, span
            self._window_hidden = hidden[:, self.window_start:]
            self._steps_since_refresh = 1
        else:
            assert self._window_hidden is not None
            if self._kept_rows is not None:  # rows finished: the others keep their keys, as if alone
                self._cache.keep_rows(self._kept_rows)
                self._window_hidden = self._window_hidden.index_select(0, self._kept_rows)
                self._rows = rows
            ran = model.final_hidden(ids[:, first:stop], attention_mask=attention_mask[:, first:stop],
                                     positions=positions[:, first:stop], kv_cache=self._cache, write_cache=False,
                                     **options)
            if shifted:
                ran = read_from_previous_position(ran, positions[:, first:stop])[:, start - first:]
            kept = self._window_hidden
            self._window_hidden = torch.cat([kept[:, :start - self.window_start], ran,
                                             kept[:, stop - self.window_start:]], dim=1)
            self._steps_since_refresh += 1
        return torch.nn.functional.linear(self._window_hidden, model.lm_head_weight)
