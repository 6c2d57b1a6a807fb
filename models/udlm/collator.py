"""UDLM training rows: a response window per sample, one canvas block of it, uniform random-token noise.

:class:`~xdllm.collate.DLLMCollator` in response-window mode lays the encoder rows out:
``[bos] + prompt + response`` with the response (``target + [eos]``, or EOS-filled to
``target_length``) filled with supervised, attended EOS to whole ``block_size`` blocks, rows
right-padded. RoPE positions are shifted so that every response starts on a block boundary
(:mod:`~xdllm_models.hybrid.layout`), which makes the response's blocks the ones counted from
positions.

Each sample then gets one canvas: a response block chosen uniformly from a generator seeded by
``(seed, step, sample_index)`` (salted, so the choice is independent of the noise), corrupted by
:func:`~xdllm.diffusion.corrupt_uniform_random` with one level per example through
:func:`~xdllm.diffusion.corrupt_per_sample`: the noise depends only on ``(seed, step,
sample_index)``, not on the batch, the prompt length or the padding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Float, Integer
from torch import Tensor

from xdllm.collate import DLLMCollator, check_examples, check_length, supervised_tail
from xdllm.diffusion import corrupt_per_sample, corrupt_uniform_random
from xdllm.diffusion.seeding import sample_seed
from xdllm.interfaces import Example, Tokenizer
from xdllm_models.hybrid.layout import block_aligned_positions
from xdllm_models.udlm.types import UDLMBatch

BLOCK_CHOICE_SALT = 0x5BD1E995
"""XORed into a sample's noise seed to seed its block choice: a separate stream."""


def chosen_blocks(seed: int, steps: Sequence[int], sample_indices: Sequence[int],
                  n_blocks: Integer[Tensor, " batch"]) -> Integer[Tensor, " batch"]:
    """One block in ``[0, n_blocks[i])`` per sample, uniformly, from ``(seed, step, sample_index)``."""
    draws = []
    for step, index, count in zip(steps, sample_indices, n_blocks.tolist()):
        generator = torch.Generator().manual_seed(sample_seed(seed, step, index) ^ BLOCK_CHOICE_SALT)
        draws.append(int(torch.randint(count, (), generator=generator)))
    return torch.tensor(draws, dtype=torch.long)


class UDLMCollator:
    """Examples to a :class:`~xdllm_models.udlm.types.UDLMBatch`.

    Args:
        tokenizer: pad, bos and eos ids, and the vocabulary the noise draws from.
        block_size: canvas size: the response is filled to whole blocks of it.
        seed: run seed the per-sample block choice and noise derive from.
        eps: smallest noise level (levels are ``U(eps, 1)``).
        target_length: EOS fill of each response to this many slots (None: ``target + [eos]``).
        max_length: longest allowed row (``[bos] + prompt + response``); longer is an error,
            never a truncation.
    """

    def __init__(self, tokenizer: Tokenizer, block_size: int, seed: int = 0, eps: float = 1e-3,
                 target_length: int | None = None, max_length: int | None = None) -> None:
        where = type(self).__name__
        if block_size < 1:
            raise ValueError(f"{where}: block_size must be >= 1, got {block_size}")
        if not 0.0 <= eps < 1.0:
            raise ValueError(f"{where}: eps must be in [0, 1), got {eps}")
        if seed < 0:
            raise ValueError(f"{where}: seed must be >= 0, got {seed}")
        self.tokenizer = tokenizer
        self.block_size = block_size
        self.seed = seed
        self.eps = eps
        self.target_length = target_length
        self.max_length = max_length
        self.layout = DLLMCollator(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                   block_size=block_size, response_window=True)

    def __call__(self, examples: Sequence[Example]) -> UDLMBatch:
        where = type(self).__name__
        check_examples(examples, where)
        tok = self.tokenizer
        samples = []
        for sample in examples:
            prefix = [tok.bos_token_id, *sample["prompt_ids"]]
            response = supervised_tail(sample, tok.eos_token_id, self.target_length, where)
            samples.append({"input_ids": prefix + response, "loss_mask": [0] * len(prefix) + [1] * len(response),
                            "attention_mask": [1] * (len(prefix) + len(response))})
        check_length(examples, [len(s["input_ids"]) for s in samples], self.max_length,
                     "[bos]+prompt+response", where)
        rows = self.layout(samples)
        clean, loss_mask = rows["input_ids"], rows["loss_mask"]
        n_rows, width = clean.shape
        supervised = loss_mask != 0
        response_start = supervised.int().argmax(1)  # every response has >= 1 token (eos)
        positions = block_aligned_positions(torch.arange(width).expand(n_rows, width), response_start,
                                            self.block_size)
        steps = [int(s["step"]) for s in examples]
        indices = [int(s["sample_index"]) for s in examples]
        blocks = chosen_blocks(self.seed, steps, indices, supervised.sum(1) // self.block_size)
        columns = (response_start + blocks * self.block_size)[:, None] + torch.arange(self.block_size)
        canvas_clean, canvas_loss_mask = clean.gather(1, columns), loss_mask.gather(1, columns)
        noisy, noise_mask, p_mask = self._corrupt(canvas_clean, canvas_loss_mask, steps, indices)
        return UDLMBatch(
            input_ids=clean, attention_mask=rows["attention_mask"].bool(), loss_mask=loss_mask,
            positions=positions, canvas_block=blocks, canvas_input_ids=noisy, canvas_target_ids=canvas_clean,
            canvas_noise_mask=noise_mask, canvas_loss_mask=canvas_loss_mask, canvas_p_mask=p_mask,
            canvas_positions=positions.gather(1, columns), sample_index=torch.tensor(indices, dtype=torch.long))

    def _corrupt(self, canvas: Integer[Tensor, "batch block"], loss_mask: Float[Tensor, "batch block"],
                 steps: list[int], indices: list[int]) -> tuple[Tensor, Tensor, Tensor]:
        """Uniform random-token noise, one level per example, from each sample's own seed."""
        return corrupt_per_sample(corrupt_uniform_random, canvas, loss_mask, base_seed=self.seed,
                                  global_step=steps, sample_indices=indices,
                                  vocab_size=self.tokenizer.vocab_size, eps=self.eps)
