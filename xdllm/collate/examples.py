"""Helpers every family's collators share: checking examples, laying rows out, EOS fill."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import chain

import torch
from jaxtyping import Bool, Integer
from torch import Tensor

from xdllm.interfaces import Example

_EXAMPLE_KEYS = ("prompt_ids", "target_ids", "sample_index", "step")

log = logging.getLogger(__name__)


def check_examples(examples: Sequence[Example], where: str) -> None:
    if len(examples) == 0:
        raise ValueError(f"{where}: cannot collate an empty batch")
    for row, sample in enumerate(examples):
        for key in _EXAMPLE_KEYS:
            if key not in sample:
                raise ValueError(f"{where}: example {row} has no {key!r}")


def check_length(examples: Sequence[Example], lengths: Sequence[int], max_length: int | None,
                  what: str, where: str) -> None:
    if max_length is None:
        return
    for sample, length in zip(examples, lengths):
        if length > max_length:
            raise ValueError(f"{where}: sample {sample['sample_index']} has {what} of {length} tokens, "
                             f"more than max_length={max_length}")


def place_rows(rows: Sequence[Sequence[int]], starts: Integer[Tensor, " batch"], width: int,
           fill: int) -> tuple[Integer[Tensor, "batch width"], Bool[Tensor, "batch width"]]:
    """Rows written at ``starts`` into a ``[batch, width]`` tensor of ``fill``; also where they lie.

    One flat copy: the True entries of the placement mask, read row by row, are exactly the
    concatenated rows in order.
    """
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)
    columns = torch.arange(width)
    placed = (columns >= starts[:, None]) & (columns < (starts + lengths)[:, None])
    out = torch.full((len(rows), width), fill, dtype=torch.long)
    out[placed] = torch.tensor(list(chain.from_iterable(rows)), dtype=torch.long)
    return out, placed


def supervised_tail(sample: Example, eos_token_id: int, target_length: int | None,
                    where: str) -> list[int]:
    """The supervised answer: ``target + [eos]``, or with ``target_length`` the target followed
    by as many EOS as fill exactly ``target_length`` slots (EOS fill, as in LLaDA-style SFT).

    The fill teaches the model where an answer ends inside a fixed-size canvas, which is what
    generation gives it: ``max_new_tokens`` masks after the prompt.
    """
    target = sample["target_ids"]
    if target_length is None:
        return [*target, eos_token_id]
    if len(target) + 1 > target_length:
        raise ValueError(f"{where}: sample {sample['sample_index']} has a target of {len(target)} "
                         f"tokens; target_length={target_length} leaves no room for its EOS")
    return [*target, *[eos_token_id] * (target_length - len(target))]


_warned_unfilled: set[str] = set()  # the knobs warned about in this process (a worker inherits it)


def warn_unfilled_answers(examples: Sequence[Example], target_length: int | None, knob: str, where: str) -> None:
    """Warn once per process and ``knob`` when a batch holds answers (after prompts) or documents
    (free text) that differ in length while there is no EOS fill: training then never shows masks
    past a response's end, and a generation that starts from ``max_new_tokens`` masks fills them
    with more answer (0.0 exact match on ``varlen_sort``) or, from an empty prompt, with text that
    runs on to the end of the canvas and never ends (every sample of the shipped ``text_mdlm``,
    experiments/gen_ppl_text.md). ``knob`` is the override that turns the fill on."""
    if knob in _warned_unfilled or target_length is not None:
        return
    lengths = [len(sample["target_ids"]) for sample in examples]
    if min(lengths) == max(lengths):
        return
    _warned_unfilled.add(knob)
    if not any(sample["prompt_ids"] for sample in examples):
        log.warning("%s: documents in one batch are %d to %d tokens long and %s is null: training never shows the "
                    "model masks past a document's end, so generation from an empty prompt (max_new_tokens masks) "
                    "writes text that runs on to the end of the canvas and never ends; for texts that end set "
                    "%s='${derived.max_new_tokens}' (EOS fill)", where, min(lengths), max(lengths), knob, knob)
        return
    log.warning("%s: answers in one batch are %d to %d tokens long and %s is null: training never shows the "
                "model masks past an answer's end, so generation (max_new_tokens masks after the prompt) will fill "
                "them with more answer; for answers of varying length set %s='${derived.max_new_tokens}' (EOS "
                "fill)", where, min(lengths), max(lengths), knob, knob)


_warned_split: set[str] = set()  # the collators warned about in this process


def warn_split_documents(lengths: Sequence[int], row_length: int, where: str) -> None:
    """Warn once per process and collator (``where``) when a document is longer than the packed
    rows: packing then trains it as chunks of at most ``row_length`` tokens, each attending only
    within itself with positions from 0, so the model never sees it whole, nor the later
    positions a generation of that length reads."""
    longest = max(lengths)
    if where in _warned_split or longest <= row_length:
        return
    _warned_split.add(where)
    log.warning("%s: a document of %d tokens (bos and eos included) is longer than the packed rows (row_length=%d): "
                "it is trained as chunks of at most %d tokens, each attending only within itself; to train on whole "
                "documents set collator.train.row_length and collator.val.row_length to at least the longest "
                "document's length", where, longest, row_length, row_length)


def longest_row(rows: Sequence[Sequence[int]]) -> int:
    return max(len(row) for row in rows)


