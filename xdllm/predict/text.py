"""Decoding each row's output region to text, cut after the first end-of-sequence token."""

from __future__ import annotations

from jaxtyping import Integer
from torch import Tensor

from xdllm.interfaces import Tokenizer


def region_ids(ids: Integer[Tensor, "batch seq_len"], output_start: Integer[Tensor, " batch"],
               region_len: Integer[Tensor, " batch"], eos_token_id: int) -> list[list[int]]:
    """Each row's output-region ids up to and including its first EOS (one host transfer)."""
    rows = ids.tolist()
    starts = output_start.tolist()
    lengths = region_len.tolist()
    regions = []
    for row, start, length in zip(rows, starts, lengths):
        region = row[start:start + length]
        if eos_token_id in region:
            region = region[:region.index(eos_token_id) + 1]
        regions.append(region)
    return regions


def decode_regions(tokenizer: Tokenizer, ids: Integer[Tensor, "batch seq_len"],
                   output_start: Integer[Tensor, " batch"], region_len: Integer[Tensor, " batch"],
                   skip_special_tokens: bool) -> list[str]:
    """The text of each row's output region (the EOS itself is shown only with specials)."""
    return [tokenizer.decode(region, skip_special_tokens=skip_special_tokens)
            for region in region_ids(ids, output_start, region_len, tokenizer.eos_token_id)]
