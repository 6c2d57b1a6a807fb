"""MDLM validation: the ELBO bound on held-out samples, and exact match where there are answers.

The bound is the masked-diffusion NELBO of the linear schedule, estimated per sample as
``(1/K) Σ_k Σ_{masked at t_k} -log p(x_i | x_{t_k}) / t_k`` with ``t = (1 - eps) u + eps``,
divided by the number of supervised tokens: an upper bound on the NLL per token (nats), whose
exponential bounds the perplexity. ``K`` levels per sample are stratified,
``u_k = (u_0 + k / K) mod 1``, which lowers the variance against ``K`` independent draws at the
same cost. All randomness comes from counter-based streams keyed by ``(seed, sample_index)``,
so the value does not depend on batch composition or padding, and repeats exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from xdllm.evaluate import AnswerEvaluator
from xdllm.interfaces import LossFunction, MetricSums, Tokenizer
from xdllm.losses.token_nll import per_token_nll
from xdllm.predict.streams import Purpose, row_keys, uniforms

MAX_EXPONENT = 700.0
"""``exp`` of more than this overflows a float; the perplexity bound is then reported as inf."""


class MDLMEvaluator(AnswerEvaluator):
    """``loss`` (the training objective), ``nll_bound`` and ``ppl_bound`` on the loss loader;
    exact match and token accuracy of generated answers on the prediction loader.

    Args:
        tokenizer: mask, pad and eos ids.
        num_levels: noise levels ``K`` per sample (forward passes per batch).
        eps: smallest masking level (as in training).
        seed: seed of the noise streams.
    """

    def __init__(self, tokenizer: Tokenizer, num_levels: int = 4, eps: float = 1e-3, seed: int = 0) -> None:
        super().__init__(tokenizer)
        if num_levels < 1:
            raise ValueError(f"MDLMEvaluator: num_levels must be >= 1, got {num_levels}")
        if not 0.0 <= eps < 1.0:
            raise ValueError(f"MDLMEvaluator: eps must be in [0, 1), got {eps}")
        self.num_levels = num_levels
        self.eps = eps
        self.seed = seed

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        sums = dict(super().loss_metrics(model, batch, loss_fn))
        supervised = batch["loss_mask"] != 0
        sums["nll_bound"] = (self.bound_sum(model, batch), supervised.sum().double())
        return sums

    def bound_sum(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> Float[Tensor, ""]:
        """``Σ_samples`` of the per-sample bound numerator, averaged over the ``K`` levels."""
        clean, supervised = batch["target_ids"], batch["loss_mask"] != 0
        keys = row_keys(self.seed, batch["sample_index"].to(clean.device))
        offsets = (supervised.long().cumsum(1) - 1).clamp(min=0)  # i-th supervised token -> i
        base = uniforms(keys, 0, Purpose.NOISE_LEVEL, 1)[:, 0]
        total = torch.zeros((), dtype=torch.float64, device=clean.device)
        for level in range(self.num_levels):
            t = (1.0 - self.eps) * torch.remainder(base + level / self.num_levels, 1.0) + self.eps
            draws = uniforms(keys, level, Purpose.NOISE_MASK, clean.shape[1]).gather(1, offsets)
            masked = supervised & (draws < t[:, None])
            noisy = torch.where(masked, self.tokenizer.mask_token_id, clean)
            logits = model(noisy, attention_mask=batch["attention_mask"], positions=batch.get("positions"))
            nll = per_token_nll(logits.float(), clean)
            total += torch.where(masked, nll / t[:, None], 0.0).sum().double()
        return total / self.num_levels

    def finalize(self, means: Mapping[str, float]) -> dict[str, float]:
        values = dict(means)
        if "nll_bound" in values:
            nll = values["nll_bound"]
            values["ppl_bound"] = math.exp(nll) if nll < MAX_EXPONENT else math.inf
        return values
