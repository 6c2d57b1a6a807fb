"""BD3-LM validation: the NELBO bound on held-out samples, and exact match where there are answers.

The bound of a row is the sum over its blocks of each block's masked-diffusion NELBO given the
clean blocks before it (the linear schedule over the whole range ``t in [0, 1]``, whatever the
training clipping). For a block with ``n`` supervised tokens it equals
``Σ_{k=1..n} (1/k) E_{|S|=k} Σ_{i in S} -log p(x_i | x_{-S}, clean blocks before)``, because
``∫ (1/t) C(n,k) t^k (1-t)^(n-k) dt = 1/k``. It is estimated without the ``1/t`` variance: at
each of ``K`` levels a block masks ``k`` of its supervised tokens, chosen uniformly, and adds
``(n / k)`` times their NLL, with ``k = floor(u n) + 1`` and ``u`` stratified per block,
``u_j = (u_0 + j / K) mod 1``. One ``[x_t | x_0]`` forward pass per level scores every block.

With ``block_size = 1`` every block is one token masked and predicted from the clean tokens
before it: the bound is exactly the autoregressive NLL of the network, with no randomness left.
``nll_bound`` is the bound per supervised token (nats), ``ppl_bound = exp(nll_bound)``. All
draws come from counter-based streams keyed by ``(seed, sample_index)`` and the column, and
columns are the sample's own positions, so the value does not depend on the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from xdllm.evaluate.bound_evaluator import BoundEvaluator
from xdllm.evaluate.bounds import stratified_levels
from xdllm.interfaces import Tokenizer
from xdllm.losses.token_nll import per_token_nll
from xdllm.predict.streams import Purpose, row_keys, uniforms
from xdllm_models.bd3lm.two_stream import denoising_logits


class BD3LMEvaluator(BoundEvaluator):
    """``loss`` (the training objective), ``nll_bound`` and ``ppl_bound`` on the loss loader
    (right-padded rows of :class:`~xdllm_models.bd3lm.collator.BD3LMCollator`); exact match and
    token accuracy of generated answers on the prediction loader.

    ``nll_bound`` divides the bound by the supervised tokens, the response's EOS fill to whole
    blocks included (the training objective's count); ``text_nll_bound`` (and
    ``text_ppl_bound``) divides the same bound by the tokens through each response's first EOS.
    The fill's terms are not negative, so it still bounds the NLL per text token, and unlike
    ``nll_bound`` it compares across block sizes (more fill, more near-free tokens).

    Args:
        tokenizer: mask, pad and eos ids.
        block_size: the diffusion block size.
        num_levels: levels ``K`` per sample (forward passes per batch).
        seed: seed of the noise streams.
    """

    def __init__(self, tokenizer: Tokenizer, block_size: int, num_levels: int = 4, seed: int = 0) -> None:
        super().__init__(tokenizer)
        if block_size < 1:
            raise ValueError(f"BD3LMEvaluator: block_size must be >= 1, got {block_size}")
        if num_levels < 1:
            raise ValueError(f"BD3LMEvaluator: num_levels must be >= 1, got {num_levels}")
        self.block_size = block_size
        self.num_levels = num_levels
        self.seed = seed

    def sample_bounds(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> Float[Tensor, " batch"]:
        """Each row's ``Σ_blocks`` of the NELBO estimate, averaged over the ``K`` levels."""
        if "segment_ids" in batch or "sample_index" not in batch:
            raise ValueError("BD3LMEvaluator: the bound needs right-padded rows with sample indices "
                             "(BD3LMCollator), not packed rows; use it as the val collator")
        clean, supervised = batch["target_ids"], batch["loss_mask"] != 0
        rows, width = clean.shape
        if width % self.block_size != 0:
            raise ValueError(f"BD3LMEvaluator: rows of {width} columns are not whole blocks of {self.block_size}")
        blocks = (rows, width // self.block_size, self.block_size)
        supervised_blocks = supervised.view(blocks)
        n = supervised_blocks.sum(-1)
        keys = row_keys(self.seed, batch["sample_index"].to(clean.device))
        base = uniforms(keys, 0, Purpose.NOISE_LEVEL, blocks[1])
        total = torch.zeros(rows, dtype=torch.float64, device=clean.device)
        for level in range(self.num_levels):
            u = stratified_levels(base, level, self.num_levels)
            k = torch.minimum(torch.floor(u * n).long() + 1, n)
            draws = uniforms(keys, level, Purpose.NOISE_MASK, width).view(blocks)
            rank = torch.where(supervised_blocks, draws, 2.0).argsort(-1).argsort(-1)
            masked = supervised_blocks & (rank < k[..., None])
            noisy = torch.where(masked.view(rows, width), self.tokenizer.mask_token_id, clean)
            logits = denoising_logits(model, noisy, clean, self.block_size, attention_mask=batch.get("attention_mask"),
                                      positions=batch.get("positions"))
            nll = torch.where(masked, per_token_nll(logits.float(), clean).view(blocks), 0.0).sum(-1)
            total += (nll * n / k.clamp_min(1)).sum(1).double()
        return total / self.num_levels
