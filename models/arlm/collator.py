"""ARLM training rows: each sample is one document ``[bos] + prompt + response``.

The response is ``target + [eos]`` (or, with ``target_length``, the target followed by EOS up to
that many slots, see :func:`~xdllm.collate.supervised_tail`); it is what the model learns to
predict, one token from the tokens before it. For a text corpus the prompt is empty, so every
token after ``bos`` is supervised. Nothing is corrupted: the rows are the clean tokens.

:class:`ARLMCollator` puts one document per right-padded row; :class:`PackedARLMCollator` packs
documents into fixed-length rows with :func:`~xdllm.data.packing.plan_packing` (segment ids and
positions restarting per chunk), where the causal rule keeps attention inside each document.
In both, ``loss_mask`` marks a token only when the token before it in the row belongs to the
same document (chunk), so the next-token shift never crosses a boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import torch

from xdllm.collate import check_examples, check_length, longest_row, place_rows, supervised_tail
from xdllm.collate.examples import warn_split_documents
from xdllm.data.packing import plan_packing
from xdllm.interfaces import Example, Tokenizer
from xdllm_models.arlm.types import ARLMBatch


def documents(examples: Sequence[Example], tokenizer: Tokenizer, target_length: int | None,
              where: str) -> tuple[list[list[int]], list[list[bool]]]:
    """Each example's ``[bos] + prompt + response`` and which of its tokens are supervised."""
    check_examples(examples, where)
    rows, supervised = [], []
    for sample in examples:
        prefix = [tokenizer.bos_token_id, *sample["prompt_ids"]]
        response = supervised_tail(sample, tokenizer.eos_token_id, target_length, where)
        rows.append(prefix + response)
        supervised.append([False] * len(prefix) + [True] * len(response))
    return rows, supervised


class ARLMCollator:
    """Examples to an :class:`~xdllm_models.arlm.types.ARLMBatch`, one right-padded row each.

    Args:
        tokenizer: pad, bos and eos ids.
        target_length: EOS fill of each response to this many slots (None: ``target + [eos]``).
        max_length: longest allowed row; longer is an error, never a truncation.
    """

    def __init__(self, tokenizer: Tokenizer, target_length: int | None = None,
                 max_length: int | None = None) -> None:
        if target_length is not None and target_length < 1:
            raise ValueError(f"ARLMCollator: target_length must be >= 1 or None, got {target_length}")
        self.tokenizer = tokenizer
        self.target_length = target_length
        self.max_length = max_length

    def __call__(self, examples: Sequence[Example]) -> ARLMBatch:
        where = type(self).__name__
        rows, supervised = documents(examples, self.tokenizer, self.target_length, where)
        check_length(examples, [len(row) for row in rows], self.max_length, "[bos]+prompt+response", where)
        width = longest_row(rows)
        starts = torch.zeros(len(rows), dtype=torch.long)
        input_ids, attention_mask = place_rows(rows, starts, width, self.tokenizer.pad_token_id)
        loss_mask, _ = place_rows([[int(s) for s in row] for row in supervised], starts, width, 0)
        return ARLMBatch(input_ids=input_ids, loss_mask=loss_mask.bool(), attention_mask=attention_mask,
                         sample_index=torch.tensor([int(s["sample_index"]) for s in examples], dtype=torch.long))


class PackedARLMCollator:
    """Examples to packed :class:`~xdllm_models.arlm.types.ARLMBatch` rows of ``row_length``.

    A document longer than a row is split into chunks (never truncated); each chunk is its own
    segment, so its first token is not supervised (nothing before it in the row to predict it
    from). ``num_rows`` pads every batch to exactly that many rows (one shape for a compiled
    model; a batch that needs more is an error).
    """

    def __init__(self, tokenizer: Tokenizer, row_length: int, target_length: int | None = None,
                 num_rows: int | None = None) -> None:
        if row_length < 2:
            raise ValueError(f"PackedARLMCollator: row_length must be >= 2, got {row_length}")
        if num_rows is not None and num_rows < 1:
            raise ValueError(f"PackedARLMCollator: num_rows must be >= 1 or None, got {num_rows}")
        if target_length is not None and target_length < 1:
            raise ValueError(f"PackedARLMCollator: target_length must be >= 1 or None, got {target_length}")
        self.tokenizer = tokenizer
        self.row_length = row_length
        self.target_length = target_length
        self.num_rows = num_rows

    def __call__(self, examples: Sequence[Example]) -> ARLMBatch:
        rows, supervised = documents(examples, self.tokenizer, self.target_length, type(self).__name__)
        lengths = [len(row) for row in rows]
        warn_split_documents(lengths, self.row_length, type(self).__name__)
        plan = plan_packing(lengths, self.row_length, self.num_rows)
        tokens = torch.tensor(list(chain.from_iterable(rows)), dtype=torch.long)
        is_supervised = torch.tensor(list(chain.from_iterable(supervised)), dtype=torch.bool)
        loss_mask = plan.gather(is_supervised, False) & (plan.positions > 0)  # a chunk's first token has no context
        return ARLMBatch(input_ids=plan.gather(tokens, self.tokenizer.pad_token_id), loss_mask=loss_mask,
                         positions=plan.positions, segment_ids=plan.segment_ids)
