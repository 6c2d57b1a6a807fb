"""BD3-LM training rows: block-aligned documents (:mod:`~xdllm_models.bd3lm.layout`), laid out
one per right-padded row or packed many per fixed-length row.

:class:`BD3LMCollator` writes each document at column ``offset`` of its row and gives every row
the positions ``0, 1, ...``: a document's tokens keep the block-aligned positions of its layout,
columns and positions coincide, and block ``b`` of every row is columns ``[b bs, (b+1) bs)``. The
``offset`` columns before the document are padding. Rows are padded to a whole number of blocks.

:class:`PackedBD3LMCollator` packs the documents with :func:`~xdllm.data.packing.plan_packing`:
segment ids keep attention inside each document and positions stay the document's own. A
document longer than a row is split into chunks, each its own segment, with the positions of
its tokens in the document, so its blocks stay where they were.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from xdllm.collate import warn_split_documents
from xdllm.data.packing import plan_packing
from xdllm.interfaces import Example, Tokenizer
from xdllm_models.bd3lm.layout import BlockDocuments
from xdllm_models.bd3lm.types import BD3LMBatch


class BD3LMCollator:
    """Examples to a right-padded :class:`~xdllm_models.bd3lm.types.BD3LMBatch`.

    Arguments: those of :class:`~xdllm_models.bd3lm.layout.BlockDocuments`.
    """

    def __init__(self, tokenizer: Tokenizer, block_size: int, seed: int = 0, noise: str = "uniform",
                 noise_low: float = 1e-3, noise_high: float = 1.0, half_life_ratio: float | None = None,
                 target_length: int | None = None, max_positions: int | None = None) -> None:
        self.documents = BlockDocuments(tokenizer, block_size, seed, noise, noise_low, noise_high, half_life_ratio,
                                        target_length, max_positions)
        self.tokenizer = tokenizer

    def __call__(self, examples: Sequence[Example]) -> BD3LMBatch:
        docs = self.documents(examples, type(self).__name__)
        block_size = self.documents.block_size
        lengths = torch.tensor(docs.lengths)
        starts = docs.position[torch.cumsum(lengths, 0) - lengths]  # each document's offset
        width = int((starts + lengths).max())
        width += -width % block_size
        columns = torch.arange(width)
        placed = (columns >= starts[:, None]) & (columns < (starts + lengths)[:, None])

        def lay_out(values: torch.Tensor, fill: float | int | bool) -> torch.Tensor:
            rows = torch.full(placed.shape, fill, dtype=values.dtype)
            rows[placed] = values
            return rows

        pad_id = self.tokenizer.pad_token_id
        return BD3LMBatch(
            input_ids=lay_out(docs.noisy, pad_id), target_ids=lay_out(docs.clean, pad_id),
            loss_mask=lay_out(docs.loss_mask, False), noise_mask=lay_out(docs.noise_mask, False),
            p_mask=lay_out(docs.p_mask, 1.0), positions=columns.expand(placed.shape).contiguous(),
            attention_mask=placed,
            sample_index=torch.tensor([int(s["sample_index"]) for s in examples], dtype=torch.long))


class PackedBD3LMCollator:
    """Examples to packed :class:`~xdllm_models.bd3lm.types.BD3LMBatch` rows of ``row_length``.

    ``num_rows`` pads every batch to exactly that many rows (one shape for a compiled model; a
    batch that needs more is an error). Other arguments: those of
    :class:`~xdllm_models.bd3lm.layout.BlockDocuments`.
    """

    def __init__(self, tokenizer: Tokenizer, block_size: int, row_length: int, num_rows: int | None = None,
                 seed: int = 0, noise: str = "uniform", noise_low: float = 1e-3, noise_high: float = 1.0,
                 half_life_ratio: float | None = None, target_length: int | None = None,
                 max_positions: int | None = None) -> None:
        if row_length < 1:
            raise ValueError(f"PackedBD3LMCollator: row_length must be >= 1, got {row_length}")
        if num_rows is not None and num_rows < 1:
            raise ValueError(f"PackedBD3LMCollator: num_rows must be >= 1 or None, got {num_rows}")
        self.documents = BlockDocuments(tokenizer, block_size, seed, noise, noise_low, noise_high, half_life_ratio,
                                        target_length, max_positions)
        self.tokenizer = tokenizer
        self.row_length = row_length
        self.num_rows = num_rows

    def __call__(self, examples: Sequence[Example]) -> BD3LMBatch:
        docs = self.documents(examples, type(self).__name__)
        warn_split_documents(docs.lengths, self.row_length, type(self).__name__)
        plan = plan_packing(docs.lengths, self.row_length, self.num_rows)
        pad_id = self.tokenizer.pad_token_id
        return BD3LMBatch(
            input_ids=plan.gather(docs.noisy, pad_id), target_ids=plan.gather(docs.clean, pad_id),
            loss_mask=plan.gather(docs.loss_mask, False), noise_mask=plan.gather(docs.noise_mask, False),
            p_mask=plan.gather(docs.p_mask, 1.0), positions=plan.gather(docs.position, 0),
            segment_ids=plan.segment_ids)
