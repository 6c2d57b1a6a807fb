"""MLM collators: :class:`~xdllm.interfaces.Example` lists to tensor batches.

A training sequence is ``[bos] + prompt + target + [eos]``. The training collators corrupt the
supervised region with :func:`~xdllm.diffusion.corrupt_uniform`, applied per sample through
:func:`~xdllm.diffusion.corrupt_per_sample`, so a sample's mask pattern depends only on
``(seed, example["step"], example["sample_index"])``. To keep it independent of the batch it
shares, the noise is drawn on a canonical layout (the sample's supervised tokens starting at
column 0) and then written into the batch layout; the CPU generator draws a row's values in
order, so the batch's padded width does not change them either.

The loss (``MLMLoss``) is taken where ``input_ids == mask_token_id``; bos, prompt (for the
seq2seq collators) and padding are never masked. Every collator returns tensors only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from jaxtyping import Integer
from torch import Tensor

from xdllm.collate import (
    PromptCollator,
    check_examples,
    check_length,
    longest_row,
    place_rows,
    supervised_tail,
    warn_unfilled_answers,
)
from xdllm.collate.attention_annealing import annealing_entries, check_annealing_steps
from xdllm.collate.prompt_dropout import check_prompt_dropout, dropped_prompts, null_prompts
from xdllm.diffusion import corrupt_per_sample, corrupt_uniform
from xdllm.interfaces import Example, Tokenizer
from xdllm_models.mlm.types import MLMBatch


def corrupt_supervised(examples: Sequence[Example], supervised: Sequence[Sequence[int]], mask_token_id: int,
                       seed: int, eps: float) -> Integer[Tensor, " num_supervised"]:
    """The corrupted supervised tokens of all examples, concatenated in order.

    Noise is drawn on the canonical layout (each row's supervised tokens from column 0), so it
    does not depend on where the tokens sit in the batch; each row uses its own ``step``.
    """
    clean, placed = place_rows(supervised, torch.zeros(len(supervised), dtype=torch.long), longest_row(supervised), 0)
    noisy, _, _ = corrupt_per_sample(
        corrupt_uniform, clean, placed, base_seed=seed,
        global_step=[int(sample["step"]) for sample in examples],
        sample_indices=[int(sample["sample_index"]) for sample in examples],
        mask_token_id=mask_token_id, eps=eps)
    return noisy[placed]


class _CorruptingCollator:
    """Shared by the training collators: lay out ``[bos] + prompt + target + [eos]`` rows and
    corrupt their supervised part.

    Subclasses choose what is supervised (everything after bos, or target + eos only) and
    whether rows are shifted so every prompt ends at the same column. ``max_length`` bounds each
    sequence (longer is an error, never a truncation); ``eps`` is the minimum masking
    probability; ``seed`` the run seed the per-sample noise derives from; ``target_length``
    turns on EOS fill (:func:`supervised_tail`) for variable-length answers; ``prompt_dropout``
    (prompt/answer collators only) shows that share of the rows a null prompt, for classifier-free
    guidance (:mod:`xdllm.collate.prompt_dropout`); ``attention_annealing_steps``: over this many
    first optimizer steps training attention opens from causal to bidirectional
    (:mod:`xdllm.collate.attention_annealing`; 0: none).
    """

    supervise_prompt: ClassVar[bool]
    align_prompts: ClassVar[bool]

    def __init__(self, tokenizer: Tokenizer, seed: int = 0, max_length: int | None = None,
                 eps: float = 1e-3, target_length: int | None = None, prompt_dropout: float = 0.0,
                 attention_annealing_steps: int = 0) -> None:
        where = type(self).__name__
        if seed < 0:
            raise ValueError(f"{where}: seed must be >= 0, got {seed}")
        check_prompt_dropout(prompt_dropout, where)
        check_annealing_steps(attention_annealing_steps, where)
        if prompt_dropout and self.supervise_prompt:
            raise ValueError(f"{where} supervises every token after bos and has no prompt to drop; "
                             "prompt_dropout is for the prompt/answer collators")
        self.tokenizer = tokenizer
        self.seed = seed
        self.max_length = max_length
        self.eps = eps
        self.target_length = target_length
        self.prompt_dropout = prompt_dropout
        self.attention_annealing_steps = attention_annealing_steps

    def __call__(self, examples: Sequence[Example]) -> MLMBatch:
        where = type(self).__name__
        check_examples(examples, where)
        if not self.supervise_prompt:  # answers after prompts
            warn_unfilled_answers(examples, self.target_length, "mlm.target_length", where)
        tokenizer = self.tokenizer
        sequences = [[tokenizer.bos_token_id, *sample["prompt_ids"],
                      *supervised_tail(sample, tokenizer.eos_token_id, self.target_length, where)]
                     for sample in examples]
        lengths = [len(seq) for seq in sequences]
        check_length(examples, lengths, self.max_length, "[bos]+prompt+target+[eos]", where)
        prefix_lengths = torch.tensor([1 + len(sample["prompt_ids"]) for sample in examples], dtype=torch.long)
        starts = (prefix_lengths.max() - prefix_lengths if self.align_prompts
                  else torch.zeros(len(examples), dtype=torch.long))
        width = int((starts + torch.tensor(lengths)).max())
        target_ids, attention_mask = place_rows(sequences, starts, width, tokenizer.pad_token_id)

        unsupervised = torch.ones_like(prefix_lengths) if self.supervise_prompt else prefix_lengths
        supervised = [seq[skip:] for seq, skip in zip(sequences, unsupervised.tolist())]
        # Supervised = the real tokens from each row's first supervised column on.
        supervised_placed = attention_mask & (torch.arange(width) >= (starts + unsupervised)[:, None])
        input_ids = target_ids.clone()
        input_ids[supervised_placed] = corrupt_supervised(examples, supervised, tokenizer.mask_token_id,
                                                           self.seed, self.eps)
        if self.prompt_dropout:
            columns = torch.arange(width)
            prompt_columns = (columns > starts[:, None]) & (columns < (starts + prefix_lengths)[:, None])
            dropped = dropped_prompts(examples, self.seed, self.prompt_dropout)
            input_ids = null_prompts(input_ids, prompt_columns, dropped, tokenizer.pad_token_id)
        return MLMBatch(
            input_ids=input_ids,
            target_ids=target_ids,
            supervised_mask=supervised_placed,
            attention_mask=attention_mask,
            positions=(torch.arange(width)[None, :] - starts[:, None]).clamp(min=0),
            sample_index=torch.tensor([int(sample["sample_index"]) for sample in examples], dtype=torch.long),
            **annealing_entries(examples, self.attention_annealing_steps),
        )


class DefaultMLMCollator(_CorruptingCollator):
    """Pre-training on whole sequences: everything after bos is supervised; right padding.

    Positions count from 0 at each row's bos.
    """

    supervise_prompt = True
    align_prompts = False


class MLMSeq2SeqTrainCollator(_CorruptingCollator):
    """Seq2seq training: only target + eos are corrupted and supervised; right padding.

    Positions count from 0 at each row's bos.
    """

    supervise_prompt = False
    align_prompts = False


class MLMSeq2SeqCollator(_CorruptingCollator):
    """Seq2seq training with padding on both sides, so all prompts end at the same column.

    The layout matches what the predictor sees (left-padded prompts, output region after them);
    it costs more padding than :class:`MLMSeq2SeqTrainCollator`. Positions start at 0 on each
    row's bos (and are 0 on the left padding).
    """

    supervise_prompt = False
    align_prompts = True


class MLMSeq2SeqPredCollator(PromptCollator):
    """The MLM prediction collator: left-padded ``[bos] + prompt`` and the expected
    ``target + [eos]`` (see :class:`~xdllm.collate.PromptCollator`)."""
