"""Packed MLM training batches: many documents per fixed-length row, each attending to itself.

Each :class:`~xdllm.interfaces.Example` becomes one document ``[bos] + prompt + target + [eos]``
(without bos/eos when ``add_bos_eos=False``); target (and eos) are supervised, bos and prompt
are not. Documents are corrupted exactly as :class:`~xdllm_models.mlm.collator.MLMSeq2SeqTrainCollator`
corrupts them (one level per document, noise a function of ``(seed, step, sample_index)``
only), so packing changes the layout of a batch, never its noise. They are then packed with
:func:`xdllm.data.packing.plan_packing` (best-fit decreasing; a document longer than a row is
split into chunks, each its own segment).

The batch holds tensors only (picklable across DataLoader workers); the model builds its
attention mask from ``segment_ids`` on its own device. Padding slots have segment id -1,
input and target = pad id, and are never masked, so the loss (taken where
``input_ids == mask_token_id``) never sees them.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import torch

from xdllm.collate import check_examples, supervised_tail, warn_split_documents, warn_unfilled_answers
from xdllm.collate.attention_annealing import annealing_entries, check_annealing_steps
from xdllm.collate.prompt_dropout import check_prompt_dropout, dropped_prompts
from xdllm.data.packing import plan_packing
from xdllm.interfaces import Example, Tokenizer
from xdllm_models.mlm.collator import corrupt_supervised
from xdllm_models.mlm.types import PackedFlexMLMBatch


class PackedMLMCollator:
    """Examples to :class:`PackedFlexMLMBatch` rows of exactly ``row_length`` tokens.

    The number of rows varies with the documents; the row length never does (no recompiles
    for a compiled model). ``seed`` is the run seed the per-sample noise derives from; ``eps``
    the minimum masking probability; ``target_length`` turns on EOS fill of the answer
    (:func:`~xdllm.collate.supervised_tail`; needs ``add_bos_eos``). ``num_rows``
    pads every batch with all-padding rows to exactly that many rows, so a compiled model sees
    one shape (a batch that needs more rows is an error naming both numbers). ``prompt_dropout``
    shows that share of the documents a null prompt, for classifier-free guidance
    (:mod:`xdllm.collate.prompt_dropout`). ``attention_annealing_steps``: over this many first
    optimizer steps training attention opens from causal to bidirectional inside each document
    (:mod:`xdllm.collate.attention_annealing`; 0: none).
    """

    def __init__(self, tokenizer: Tokenizer, row_length: int, seed: int = 0, eps: float = 1e-3,
                 add_bos_eos: bool = True, target_length: int | None = None,
                 num_rows: int | None = None, prompt_dropout: float = 0.0,
                 attention_annealing_steps: int = 0) -> None:
        check_prompt_dropout(prompt_dropout, "PackedMLMCollator")
        check_annealing_steps(attention_annealing_steps, "PackedMLMCollator")
        if num_rows is not None and num_rows < 1:
            raise ValueError(f"PackedMLMCollator: num_rows must be >= 1, got {num_rows}")
        if target_length is not None and not add_bos_eos:
            raise ValueError("PackedMLMCollator: target_length (EOS fill) needs add_bos_eos=True")
        if row_length < 1:
            raise ValueError(f"PackedMLMCollator: row_length must be >= 1, got {row_length}")
        if seed < 0:
            raise ValueError(f"PackedMLMCollator: seed must be >= 0, got {seed}")
        self.tokenizer = tokenizer
        self.row_length = row_length
        self.seed = seed
        self.eps = eps
        self.add_bos_eos = add_bos_eos
        self.target_length = target_length
        self.num_rows = num_rows
        self.prompt_dropout = prompt_dropout
        self.attention_annealing_steps = attention_annealing_steps

    def _documents(self, examples: Sequence[Example]) -> tuple[list[list[int]], list[list[int]]]:
        """Each example's whole document and its supervised tail (target, plus eos)."""
        if self.add_bos_eos:
            bos = [self.tokenizer.bos_token_id]
            supervised = [supervised_tail(sample, self.tokenizer.eos_token_id, self.target_length,
                                          "PackedMLMCollator") for sample in examples]
        else:
            bos, supervised = [], [list(sample["target_ids"]) for sample in examples]
        documents = [[*bos, *sample["prompt_ids"], *tail] for sample, tail in zip(examples, supervised)]
        for row, document in enumerate(documents):
            if not document:
                raise ValueError(f"PackedMLMCollator: example {row} (sample_index "
                                 f"{examples[row]['sample_index']}) has no tokens to pack")
        return documents, supervised

    def __call__(self, examples: Sequence[Example]) -> PackedFlexMLMBatch:
        check_examples(examples, "PackedMLMCollator")
        if self.add_bos_eos:
            warn_unfilled_answers(examples, self.target_length, "mlm.target_length", "PackedMLMCollator")
        documents, supervised = self._documents(examples)
        clean = torch.tensor(list(chain.from_iterable(documents)), dtype=torch.long)
        # Supervised tokens are each document's last len(supervised) tokens.
        lengths = torch.tensor([len(document) for document in documents])
        supervised_lengths = torch.tensor([len(tail) for tail in supervised])
        document_end = torch.cumsum(lengths, dim=0)
        token_document = torch.repeat_interleave(torch.arange(len(documents)), lengths)
        is_supervised = torch.arange(clean.numel()) >= (document_end - supervised_lengths)[token_document]

        noisy = clean.clone()
        noisy[is_supervised] = corrupt_supervised(examples, supervised, self.tokenizer.mask_token_id,
                                                   self.seed, self.eps)
        if self.prompt_dropout:
            offset = torch.arange(clean.numel()) - (document_end - lengths)[token_document]
            bos = int(self.add_bos_eos)
            prompt_lengths = torch.tensor([len(sample["prompt_ids"]) for sample in examples])
            in_prompt = (offset >= bos) & (offset < bos + prompt_lengths[token_document])
            dropped = dropped_prompts(examples, self.seed, self.prompt_dropout)[token_document]
            noisy = noisy.masked_fill(in_prompt & dropped, self.tokenizer.pad_token_id)
        document_lengths = lengths.tolist()
        warn_split_documents(document_lengths, self.row_length, type(self).__name__)
        plan = plan_packing(document_lengths, self.row_length, self.num_rows)
        pad_id = self.tokenizer.pad_token_id
        return PackedFlexMLMBatch(
            input_ids=plan.gather(noisy, pad_id),
            target_ids=plan.gather(clean, pad_id),
            positions=plan.positions,
            segment_ids=plan.segment_ids,
            **annealing_entries(examples, self.attention_annealing_steps),
        )
