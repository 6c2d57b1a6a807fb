"""Sequence packing: many short documents per fixed-length row, each kept to itself.

A document is first cut into chunks of at most ``row_length`` tokens (a longer document is
split, never dropped or truncated; each chunk is its own segment and its positions restart
at 0). Chunks are then assigned to rows by **best-fit decreasing**: longest chunk first, each
into the open row with the least room that still fits it, else a new row. It has the same
asymptotic worst case as first-fit decreasing (11/9 of the optimal row count) and tends to
leave the room in fewer rows; with a sorted list of remaining capacities each placement is a binary
search. See docs/packing.md.

Every slot of the ``[rows, row_length]`` grid records which token of the concatenated input
fills it, its segment (0, 1, ... in placement order within the row; :data:`PAD_SEGMENT_ID` on
padding, the trailing slots of a row), and its position inside its chunk. :class:`PackingPlan`
then lays out any per-token tensor (corrupted inputs, targets, ...) the same way.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Integer, Shaped
from torch import Tensor

from xdllm.nn.attention import PAD_DOCUMENT_ID

PAD_SEGMENT_ID = PAD_DOCUMENT_ID
"""Segment id of padding slots (documents use 0, 1, ...): the model's padding document id,
so padding is invisible to real tokens without an ``attention_mask``."""


@dataclass(frozen=True)
class PackingPlan:
    """Where each token of the concatenated documents goes in the packed rows.

    ``source_token[r, j]`` is the index into ``cat(documents)`` of the token in slot ``j`` of
    row ``r`` (-1 on padding); ``segment_ids`` and ``positions`` are what the model needs.
    ``document_ids[r, j]`` is the index of the input document the slot came from (-1 on
    padding). ``total_tokens`` is the length of ``cat(documents)``.
    """

    total_tokens: int
    source_token: Integer[Tensor, "rows row_length"]
    segment_ids: Integer[Tensor, "rows row_length"]
    positions: Integer[Tensor, "rows row_length"]
    document_ids: Integer[Tensor, "rows row_length"]

    @property
    def num_rows(self) -> int:
        return self.source_token.shape[0]

    @property
    def is_padding(self) -> Bool[Tensor, "rows row_length"]:
        return self.segment_ids == PAD_SEGMENT_ID

    def gather(self, flat_values: Shaped[Tensor, " total_tokens"], pad_value: int | float | bool
               ) -> Shaped[Tensor, "rows row_length"]:
        """Lay out per-token values (documents concatenated in input order) in the rows."""
        if flat_values.shape[0] != self.total_tokens:
            raise ValueError(f"PackingPlan.gather: plan covers {self.total_tokens} tokens, "
                             f"got {flat_values.shape[0]} values")
        packed = flat_values[self.source_token.clamp_min(0)]
        return packed.masked_fill(self.is_padding, pad_value)


def _chunk_lengths(lengths: Sequence[int], row_length: int) -> list[tuple[int, int, int]]:
    """``(document, offset, length)`` of every chunk; full chunks first within a document."""
    chunks = []
    for document, length in enumerate(lengths):
        if length < 1:
            raise ValueError(f"plan_packing: document {document} is empty (length {length}); "
                             "every document needs at least one token")
        for offset in range(0, length, row_length):
            chunks.append((document, offset, min(row_length, length - offset)))
    return chunks


def _best_fit_decreasing(chunk_lengths: Sequence[int], row_length: int) -> tuple[list[int], list[int]]:
    """Row and start column of every chunk (best-fit decreasing; ties keep input order)."""
    order = sorted(range(len(chunk_lengths)), key=lambda chunk: -chunk_lengths[chunk])
    rows, columns = [0] * len(chunk_lengths), [0] * len(chunk_lengths)
    room: list[tuple[int, int]] = []  # (free slots, row) of rows that still have room, sorted
    fill: list[int] = []  # slots used per row
    for chunk in order:
        length = chunk_lengths[chunk]
        index = bisect.bisect_left(room, (length, -1))
        if index == len(room):
            row = len(fill)
            fill.append(0)
            free = row_length
        else:
            free, row = room.pop(index)
        rows[chunk], columns[chunk] = row, fill[row]
        fill[row] += length
        if free > length:
            bisect.insort(room, (free - length, row))
    return rows, columns


def plan_packing(lengths: Sequence[int], row_length: int, num_rows: int | None = None) -> PackingPlan:
    """Pack documents of these lengths into rows of ``row_length`` slots (best-fit decreasing).

    With ``num_rows`` the plan has exactly that many rows, the unused ones all padding (one
    shape for every batch); documents needing more rows are an error naming both counts.
    """
    if row_length < 1:
        raise ValueError(f"plan_packing: row_length must be >= 1, got {row_length}")
    if num_rows is not None and num_rows < 1:
        raise ValueError(f"plan_packing: num_rows must be >= 1, got {num_rows}")
    if len(lengths) == 0:
        raise ValueError("plan_packing: no documents to pack")
    lengths = [int(length) for length in lengths]
    chunks = _chunk_lengths(lengths, row_length)
    chunk_document, chunk_offset, chunk_length = (torch.tensor(column) for column in zip(*chunks))
    rows, columns = _best_fit_decreasing(chunk_length.tolist(), row_length)
    chunk_row, chunk_column = torch.tensor(rows), torch.tensor(columns)
    rows_needed = max(rows) + 1
    if num_rows is None:
        num_rows = rows_needed
    elif rows_needed > num_rows:
        raise ValueError(f"plan_packing: these documents pack into {rows_needed} rows of "
                         f"{row_length}, more than num_rows={num_rows}; raise num_rows or "
                         "pack fewer documents per batch (data.batch_size)")

    # Segment index of a chunk = how many chunks sit before it in its row.
    by_slot = torch.argsort(chunk_row * row_length + chunk_column)
    chunk_segment = torch.empty_like(chunk_row)
    sorted_rows = chunk_row[by_slot]
    first_of_row = torch.searchsorted(sorted_rows, sorted_rows)
    chunk_segment[by_slot] = torch.arange(len(chunks)) - first_of_row

    # Expand chunks to tokens, all at once.
    document_start = torch.cumsum(torch.tensor([0, *lengths[:-1]]), dim=0)
    token_chunk = torch.repeat_interleave(torch.arange(len(chunks)), chunk_length)
    chunk_first_token = torch.cumsum(chunk_length, dim=0) - chunk_length
    within_chunk = torch.arange(token_chunk.numel()) - chunk_first_token[token_chunk]
    slot = (chunk_row * row_length + chunk_column)[token_chunk] + within_chunk

    def grid(values: Tensor, pad_value: int) -> Tensor:
        flat = torch.full((num_rows * row_length,), pad_value, dtype=torch.long)
        flat[slot] = values
        return flat.view(num_rows, row_length)

    return PackingPlan(
        total_tokens=sum(lengths),
        source_token=grid((document_start[chunk_document] + chunk_offset)[token_chunk] + within_chunk, -1),
        segment_ids=grid(chunk_segment[token_chunk], PAD_SEGMENT_ID),
        positions=grid(within_chunk, 0),
        document_ids=grid(chunk_document[token_chunk], -1),
    )
