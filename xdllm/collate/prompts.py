"""Prompts to complete, as every family's predictor receives them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import torch
from jaxtyping import Bool, Integer
from torch import Tensor
from typing_extensions import NotRequired

from xdllm.collate.examples import check_examples, check_length, longest_row, place_rows
from xdllm.interfaces import Example, Tokenizer


class PromptBatch(TypedDict):
    """Left-padded ``[bos] + prompt`` to complete; ``target_ids`` = ``target + [eos]`` when known."""

    input_ids: Integer[Tensor, "batch prompt_len"]
    attention_mask: Bool[Tensor, "batch prompt_len"]
    target_ids: NotRequired[Integer[Tensor, "batch target_len"]]
    sample_index: NotRequired[Integer[Tensor, " batch"]]


def without_target_ids(batch: Mapping[str, Any]) -> dict[str, Any]:
    """``batch`` without its ``target_ids``: a held-out document of free text is no answer to
    score a generation against (``xdllm generate`` and validation alike)."""
    return {key: value for key, value in batch.items() if key != "target_ids"}


class PromptCollator:
    """Prompts to complete: left-padded ``[bos] + prompt``, and the expected ``target + [eos]``.

    ``target_ids`` are right-padded with the pad id; ``max_length`` bounds ``[bos] + prompt``.
    """

    def __init__(self, tokenizer: Tokenizer, max_length: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length

    def __call__(self, examples: Sequence[Example]) -> PromptBatch:
        where = type(self).__name__
        check_examples(examples, where)
        tokenizer = self.tokenizer
        prefixes = [[tokenizer.bos_token_id, *sample["prompt_ids"]] for sample in examples]
        check_length(examples, [len(prefix) for prefix in prefixes], self.max_length, "[bos]+prompt", where)
        targets = [[*sample["target_ids"], tokenizer.eos_token_id] for sample in examples]
        prefix_lengths = torch.tensor([len(prefix) for prefix in prefixes], dtype=torch.long)
        width = int(prefix_lengths.max())
        input_ids, attention_mask = place_rows(prefixes, width - prefix_lengths, width, tokenizer.pad_token_id)
        target_ids, _ = place_rows(targets, torch.zeros(len(targets), dtype=torch.long), longest_row(targets),
                               tokenizer.pad_token_id)
        return PromptBatch(
            input_ids=input_ids,
            attention_mask=attention_mask,
            target_ids=target_ids,
            sample_index=torch.tensor([int(sample["sample_index"]) for sample in examples], dtype=torch.long),
        )
