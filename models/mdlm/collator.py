"""MDLM training rows: prompt/response samples laid out by ``DLLMCollator``, then corrupted.

A row is ``[bos] + prompt + response`` where the response is ``target + [eos]`` (or, with
``target_length``, the target followed by EOS up to that many slots, so variable-length answers
learn where to stop). :class:`~xdllm.collate.DLLMCollator` in response-window mode lays the rows
out: the response is rounded up to whole ``block_size`` blocks with supervised, attended EOS
fill, and the rows are right-padded.

Only the response (and its fill) is supervised and corrupted; the prompt never is. Corruption is
:func:`~xdllm.diffusion.corrupt_uniform` (one level per sample) or
:func:`~xdllm.diffusion.corrupt_blockwise` (exactly ``round(m n)`` masks, one level per sample
or per block), run through :func:`~xdllm.diffusion.corrupt_per_sample` on a canonical layout in
which every response starts at column 0: a sample's noise depends only on
``(seed, step, sample_index)``, never on its prompt length, its batch or the padding, and
kernel blocks coincide with the response blocks of the layout.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from xdllm.collate import DLLMCollator, check_examples, check_length, supervised_tail, warn_unfilled_answers
from xdllm.collate.attention_annealing import annealing_entries, check_annealing_steps
from xdllm.collate.prompt_dropout import check_prompt_dropout, dropped_prompts, null_prompts
from xdllm.diffusion import corrupt_blockwise, corrupt_per_sample, corrupt_uniform
from xdllm.interfaces import Example, Tokenizer
from xdllm_models.mdlm.types import MDLMBatch


class MDLMCollator:
    """Examples to a corrupted :class:`~xdllm_models.mdlm.types.MDLMBatch`.

    Args:
        tokenizer: pad, mask, bos and eos ids.
        seed: run seed the per-sample noise derives from.
        corruption: ``"uniform"`` (each supervised token masked independently with the row's
            level) or ``"blockwise"`` (exactly ``round(m n)`` masks per scope, position-biased).
        block_size: diffusion block size: the response is filled with EOS to whole blocks, and
            ``"blockwise"`` draws one level per block (None: no fill, one level per sample).
        eps: smallest masking level.
        half_life_ratio: position bias of ``"blockwise"`` (None: no bias).
        target_length: EOS fill of each response to this many slots (None: ``target + [eos]``).
        max_length: longest allowed row (``[bos] + prompt + response``); longer is an error,
            never a truncation.
        prompt_dropout: the share of rows shown a null prompt, for classifier-free guidance
            (:mod:`xdllm.collate.prompt_dropout`).
        attention_annealing_steps: over this many first optimizer steps, training attention
            opens from causal to bidirectional (:mod:`xdllm.collate.attention_annealing`; 0: none).
    """

    def __init__(self, tokenizer: Tokenizer, seed: int = 0, corruption: str = "uniform",
                 block_size: int | None = None, eps: float = 1e-3, half_life_ratio: float | None = 0.25,
                 target_length: int | None = None, max_length: int | None = None,
                 prompt_dropout: float = 0.0, attention_annealing_steps: int = 0) -> None:
        where = type(self).__name__
        check_prompt_dropout(prompt_dropout, where)
        check_annealing_steps(attention_annealing_steps, where)
        if corruption not in ("uniform", "blockwise"):
            raise ValueError(f"{where}: corruption must be 'uniform' or 'blockwise', got {corruption!r}")
        if block_size is not None and block_size < 1:
            raise ValueError(f"{where}: block_size must be >= 1 or None, got {block_size}")
        if not 0.0 <= eps < 1.0:
            raise ValueError(f"{where}: eps must be in [0, 1), got {eps}")
        if seed < 0:
            raise ValueError(f"{where}: seed must be >= 0, got {seed}")
        self.tokenizer = tokenizer
        self.seed = seed
        self.corruption = corruption
        self.block_size = block_size
        self.eps = eps
        self.half_life_ratio = half_life_ratio
        self.target_length = target_length
        self.max_length = max_length
        self.prompt_dropout = prompt_dropout
        self.attention_annealing_steps = attention_annealing_steps
        self.layout = DLLMCollator(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                   block_size=block_size, response_window=True)

    def _kernel_kwargs(self) -> dict:
        kwargs = {"mask_token_id": self.tokenizer.mask_token_id, "eps": self.eps}
        if self.corruption == "blockwise":
            kwargs.update(block_size=self.block_size, half_life_ratio=self.half_life_ratio)
        return kwargs

    def __call__(self, examples: Sequence[Example]) -> MDLMBatch:
        where = type(self).__name__
        check_examples(examples, where)
        if self.block_size is None:  # with blocks, the last block is filled with EOS
            warn_unfilled_answers(examples, self.target_length, "mdlm.target_length", where)
        tok = self.tokenizer
        samples, prefix_lengths = [], []
        for sample in examples:
            prefix = [tok.bos_token_id, *sample["prompt_ids"]]
            response = supervised_tail(sample, tok.eos_token_id, self.target_length, where)
            samples.append({"input_ids": prefix + response, "loss_mask": [0] * len(prefix) + [1] * len(response),
                            "attention_mask": [1] * (len(prefix) + len(response))})
            prefix_lengths.append(len(prefix))
        check_length(examples, [len(s["input_ids"]) for s in samples], self.max_length,
                     "[bos]+prompt+response", where)
        rows = self.layout(samples)
        clean, loss_mask = rows["input_ids"], rows["loss_mask"]
        noisy, noise_mask, p_mask = self._corrupt_responses(examples, clean, loss_mask,
                                                            torch.tensor(prefix_lengths))
        if self.prompt_dropout:
            columns = torch.arange(clean.shape[1])
            prompt_columns = (columns > 0) & (columns < torch.tensor(prefix_lengths)[:, None])
            noisy = null_prompts(noisy, prompt_columns, dropped_prompts(examples, self.seed, self.prompt_dropout),
                                 tok.pad_token_id)
        return MDLMBatch(
            input_ids=noisy, target_ids=clean, loss_mask=loss_mask, noise_mask=noise_mask, p_mask=p_mask,
            attention_mask=rows["attention_mask"].bool(),
            sample_index=torch.tensor([int(s["sample_index"]) for s in examples], dtype=torch.long),
            **annealing_entries(examples, self.attention_annealing_steps))

    def _corrupt_responses(self, examples: Sequence[Example], clean: Tensor, loss_mask: Tensor,
                           response_start: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Corrupt columns ``[response_start, T)`` of each row as if they began at column 0."""
        batch, width = clean.shape
        span = width - response_start
        columns = torch.arange(width)
        in_row = (columns >= response_start[:, None])                 # where responses lie in the rows
        in_canon = columns[: int(span.max())] < span[:, None]          # the same cells, from column 0
        canon_ids = torch.full(in_canon.shape, self.tokenizer.pad_token_id, dtype=clean.dtype)
        canon_mask = torch.zeros(in_canon.shape, dtype=loss_mask.dtype)
        canon_ids[in_canon], canon_mask[in_canon] = clean[in_row], loss_mask[in_row]
        kernel = corrupt_blockwise if self.corruption == "blockwise" else corrupt_uniform
        noisy_canon, noise_canon, p_canon = corrupt_per_sample(
            kernel, canon_ids, canon_mask, base_seed=self.seed,
            global_step=[int(s["step"]) for s in examples],
            sample_indices=[int(s["sample_index"]) for s in examples], **self._kernel_kwargs())
        noisy = clean.clone()
        noise_mask = torch.zeros((batch, width), dtype=torch.bool)
        p_mask = torch.ones((batch, width), dtype=torch.float32)
        noisy[in_row], noise_mask[in_row], p_mask[in_row] = (
            noisy_canon[in_canon], noise_canon[in_canon], p_canon[in_canon])
        return noisy, noise_mask, p_mask
