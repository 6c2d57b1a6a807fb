"""DFlash training rows: ARLM's ``[bos] + prompt + response`` rows plus sampled block anchors.

The target reads the clean row (its features are the drafter's context). Each row gets
``num_anchors`` anchor columns drawn without replacement from its response, excluding the last
token (an anchor needs a token after it to predict): a drafted block is ``[anchor, MASK x
(block_size - 1)]`` at the anchor's position and learns the ``block_size - 1`` tokens after it.
At generation the first anchor is the target's first generated token, so the anchors start at
the first response token. Rows with fewer candidates than ``num_anchors`` take them all and
fill the rest with padding blocks (``anchor_valid`` False). The draw is a function of
``(seed, step, sample_index)`` only, so it repeats on resume and does not depend on the batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from xdllm.collate import check_examples, longest_row, place_rows
from xdllm.diffusion.seeding import sample_seed
from xdllm.interfaces import Example, Tokenizer
from xdllm_models.arlm.collator import documents
from xdllm_models.dflash.types import DFlashBatch


class DFlashCollator:
    """Examples to a :class:`~xdllm_models.dflash.types.DFlashBatch`; see the module docstring.

    Args:
        tokenizer: pad, bos and eos ids.
        num_anchors: drafted blocks per row.
        seed: base of the per-sample anchor draws.
        target_length: EOS fill of each response to this many slots (None: ``target + [eos]``).
    """

    def __init__(self, tokenizer: Tokenizer, num_anchors: int = 4, seed: int = 0,
                 target_length: int | None = None) -> None:
        if num_anchors < 1:
            raise ValueError(f"DFlashCollator: num_anchors must be >= 1, got {num_anchors}")
        if seed < 0:
            raise ValueError(f"DFlashCollator: seed must be >= 0, got {seed}")
        self.tokenizer = tokenizer
        self.num_anchors = num_anchors
        self.seed = seed
        self.target_length = target_length

    def __call__(self, examples: Sequence[Example]) -> DFlashBatch:
        where = type(self).__name__
        check_examples(examples, where)
        rows, supervised = documents(examples, self.tokenizer, self.target_length, where)
        width = longest_row(rows)
        input_ids, attention_mask = place_rows(rows, torch.zeros(len(rows), dtype=torch.long), width,
                                               self.tokenizer.pad_token_id)
        anchors = torch.zeros((len(rows), self.num_anchors), dtype=torch.long)
        valid = torch.zeros((len(rows), self.num_anchors), dtype=torch.bool)
        for row, (flags, sample) in enumerate(zip(supervised, examples)):
            generator = torch.Generator().manual_seed(
                sample_seed(self.seed, int(sample["step"]), int(sample["sample_index"])))
            first = flags.index(True) if True in flags else len(flags)
            candidates = len(flags) - 1 - first  # response columns first .. len - 2
            count = min(self.num_anchors, max(candidates, 0))
            if count:
                picked = torch.randperm(candidates, generator=generator)[:count].sort().values + first
                anchors[row, :count] = picked
                valid[row, :count] = True
        return DFlashBatch(input_ids=input_ids, attention_mask=attention_mask.bool(), anchor_positions=anchors,
                           anchor_valid=valid,
                           sample_index=torch.tensor([int(s["sample_index"]) for s in examples], dtype=torch.long))
