"""Block-aligned training documents and their per-block noise, shared by both BD3-LM collators.

A document is ``[bos] + prompt + response``: the response is ``target + [eos]`` (or EOS-filled
to ``target_length``, see :func:`~xdllm.collate.supervised_tail`) and then filled with
supervised EOS to a whole number of blocks. Its first token sits at position
``offset = (-len([bos] + prompt)) mod block_size``, so the response starts exactly at a block
boundary: every response block is denoised from clean prompt blocks only, the way the predictor
generates it (RoPE is relative, so the shift does not change what the prompt looks like).

Only the response is corrupted, one level per block, by :func:`corrupt_uniform_per_block`
(each token masked independently with the block's level, clipped to ``[low, high)``) or by
:func:`~xdllm.diffusion.corrupt_blockwise` (exactly ``round(t n)`` masks per block). The noise
runs through :func:`~xdllm.diffusion.corrupt_per_sample` on the responses alone, each starting
at column 0, so a sample's noise depends only on ``(seed, step, sample_index)``: not on its
prompt, its batch, the padding or the packing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.collate import check_examples, supervised_tail
from xdllm.diffusion import corrupt_blockwise, corrupt_per_sample
from xdllm.interfaces import Example, Tokenizer
from xdllm_models.bd3lm.noise import check_level_range, corrupt_uniform_per_block

NOISE_KINDS = ("uniform", "blockwise")


@dataclass(frozen=True)
class NoisyDocuments:
    """The documents of a batch, concatenated in input order (one value per token)."""

    clean: Integer[Tensor, " tokens"]
    noisy: Integer[Tensor, " tokens"]
    loss_mask: Bool[Tensor, " tokens"]
    noise_mask: Bool[Tensor, " tokens"]
    p_mask: Float[Tensor, " tokens"]
    position: Integer[Tensor, " tokens"]
    lengths: list[int]


class BlockDocuments:
    """Examples to :class:`NoisyDocuments`; see the module docstring.

    Args:
        tokenizer: pad, mask, bos and eos ids.
        block_size: diffusion block size.
        seed: run seed the per-sample noise derives from.
        noise: ``"uniform"`` (independent masks at the block's level) or ``"blockwise"``
            (exactly ``round(t n)`` masks per block, :func:`~xdllm.diffusion.corrupt_blockwise`).
        noise_low, noise_high: the level range ``[beta, omega]`` (``"blockwise"`` draws in
            ``[noise_low, 1)``, so it needs ``noise_high = 1``).
        half_life_ratio: position bias of ``"blockwise"`` (None: no bias).
        target_length: EOS fill of each response to this many slots (None: ``target + [eos]``).
        max_positions: the network's position limit; a longer document is an error, never cut.
    """

    def __init__(self, tokenizer: Tokenizer, block_size: int, seed: int = 0, noise: str = "uniform",
                 noise_low: float = 1e-3, noise_high: float = 1.0, half_life_ratio: float | None = None,
                 target_length: int | None = None, max_positions: int | None = None) -> None:
        where = type(self).__name__
        if block_size < 1:
            raise ValueError(f"{where}: block_size must be >= 1, got {block_size}")
        if noise not in NOISE_KINDS:
            raise ValueError(f"{where}: noise must be one of {NOISE_KINDS}, got {noise!r}")
        check_level_range(noise_low, noise_high, where)
        if noise == "blockwise" and (noise_high != 1.0 or noise_low >= 1.0):
            raise ValueError(f"{where}: noise='blockwise' draws levels in [noise_low, 1); it cannot clip "
                             f"them from above (noise_high={noise_high}); use noise='uniform' to clip")
        if seed < 0:
            raise ValueError(f"{where}: seed must be >= 0, got {seed}")
        self.tokenizer = tokenizer
        self.block_size = block_size
        self.seed = seed
        self.noise = noise
        self.noise_low = noise_low
        self.noise_high = noise_high
        self.half_life_ratio = half_life_ratio
        self.target_length = target_length
        self.max_positions = max_positions

    def _response(self, sample: Example, where: str) -> list[int]:
        response = supervised_tail(sample, self.tokenizer.eos_token_id, self.target_length, where)
        fill = -len(response) % self.block_size
        return response + [self.tokenizer.eos_token_id] * fill

    def __call__(self, examples: Sequence[Example], where: str) -> NoisyDocuments:
        check_examples(examples, where)
        tok = self.tokenizer
        prefixes = [[tok.bos_token_id, *sample["prompt_ids"]] for sample in examples]
        responses = [self._response(sample, where) for sample in examples]
        offsets = [-len(prefix) % self.block_size for prefix in prefixes]
        lengths = [len(prefix) + len(response) for prefix, response in zip(prefixes, responses)]
        if self.max_positions is not None:
            for sample, offset, length in zip(examples, offsets, lengths):
                if offset + length > self.max_positions:
                    raise ValueError(f"{where}: sample {sample['sample_index']} needs positions up to "
                                     f"{offset + length - 1} ({length} tokens starting at the block offset "
                                     f"{offset}), beyond model.max_positions={self.max_positions}")
        clean = torch.tensor([t for prefix, response in zip(prefixes, responses) for t in prefix + response])
        in_response = torch.tensor([i >= len(prefix) for prefix, length in zip(prefixes, lengths)
                                    for i in range(length)])
        position = torch.cat([torch.arange(length) + offset for offset, length in zip(offsets, lengths)])
        noisy_responses, noise_responses, p_responses = self._corrupt(examples, responses)
        noisy, noise_mask = clean.clone(), torch.zeros_like(in_response)
        p_mask = torch.ones(clean.shape, dtype=torch.float32)
        noisy[in_response], noise_mask[in_response], p_mask[in_response] = (
            noisy_responses, noise_responses, p_responses)
        return NoisyDocuments(clean=clean, noisy=noisy, loss_mask=in_response, noise_mask=noise_mask,
                              p_mask=p_mask, position=position, lengths=lengths)

    def _corrupt(self, examples: Sequence[Example], responses: list[list[int]]
                 ) -> tuple[Tensor, Tensor, Tensor]:
        """The responses' noisy ids, noise mask and levels, concatenated."""
        response_lengths = torch.tensor([len(response) for response in responses])
        width = int(response_lengths.max())
        inside = torch.arange(width) < response_lengths[:, None]
        ids = torch.full(inside.shape, self.tokenizer.pad_token_id, dtype=torch.long)
        ids[inside] = torch.tensor([t for response in responses for t in response])
        if self.noise == "uniform":
            kernel, options = corrupt_uniform_per_block, {"low": self.noise_low, "high": self.noise_high}
        else:
            kernel, options = corrupt_blockwise, {"eps": self.noise_low, "half_life_ratio": self.half_life_ratio}
        noisy, noise_mask, p_mask = corrupt_per_sample(
            kernel, ids, inside, base_seed=self.seed, global_step=[int(s["step"]) for s in examples],
            sample_indices=[int(s["sample_index"]) for s in examples],
            mask_token_id=self.tokenizer.mask_token_id, block_size=self.block_size, **options)
        return noisy[inside], noise_mask[inside], p_mask[inside]
