"""What the likelihood evaluators share: perplexities from per-token NLLs, stratified noise
levels, the tokens a per-token figure counts, and the masked-diffusion NELBO estimate of MDLM
and the hybrid's diffusion branch.

The NELBO of the linear schedule, estimated per sample as
``(1/K) Σ_k Σ_{masked at t_k} -log p(x_i | x_{t_k}) / t_k`` with ``t = (1 - eps) u + eps``
(``estimator="time"``, MDLM's), each supervised token masked with probability ``t``; or, with
``estimator="count"`` (LLaDA's), ``(1/K) Σ_k (n / l_k) Σ_{masked} -log p`` with exactly
``l = floor(u n) + 1`` of the sample's ``n`` supervised tokens masked. Both have the same
expectation (``∫ t^(l-1) (1-t)^(n-l) C(n, l) dt = 1 / l``); the count estimator never weighs a
few masked tokens by a large ``1/t``, and its per-sample spread is smaller (measured:
``docs/evaluation.md``). Divided by the number of supervised tokens either bounds the NLL per
token. The ``K`` levels of a sample are stratified, ``u_k = (u_0 + k / K) mod 1``, which lowers
the variance against ``K`` independent draws at the same cost. Every draw comes from counter-based streams keyed by
``(seed, sample_index)`` and the sample's ``i``-th supervised token, so the value does not
depend on the batch composition or the padding, and repeats exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.losses.token_nll import per_token_nll
from xdllm.predict.streams import Purpose, row_keys, uniforms

MAX_EXPONENT = 700.0
"""``exp`` of more than this overflows a float; such a perplexity is reported as inf."""


def perplexity(nll: float) -> float:
    """``exp(nll)``, or inf where that overflows."""
    return math.exp(nll) if nll < MAX_EXPONENT else math.inf


def with_perplexities(means: Mapping[str, float], keys: Iterable[tuple[str, str]]) -> dict[str, float]:
    """``means`` plus ``ppl_key: perplexity(means[nll_key])`` for each pair whose NLL is there."""
    values = dict(means)
    for nll_key, ppl_key in keys:
        if nll_key in values:
            values[ppl_key] = perplexity(values[nll_key])
    return values


def through_first_eos(target_ids: Integer[Tensor, "batch seq_len"], supervised: Bool[Tensor, "batch seq_len"],
                      eos_token_id: int) -> Bool[Tensor, "batch seq_len"]:
    """The supervised tokens up to and including each row's first supervised EOS: the text,
    without the EOS fill that pads a response to whole blocks (whose amount depends on the block
    size, so per-token figures over it do not compare across block sizes)."""
    is_eos = (target_ids == eos_token_id) & supervised
    return supervised & (is_eos.long().cumsum(1) - is_eos.long() == 0)


def stratified_levels(base: Float[Tensor, "*shape"], level: int, num_levels: int) -> Float[Tensor, "*shape"]:
    """The ``level``-th of ``num_levels`` stratified uniforms: ``(base + level / num_levels) mod 1``."""
    return torch.remainder(base + level / num_levels, 1.0)


ESTIMATORS = ("time", "count")


def check_bound_options(where: str, num_levels: int, eps: float, estimator: str = "time") -> None:
    """Refuse a bound estimate's settings that mean nothing, naming the evaluator."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"{where}: estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")
    if num_levels < 1:
        raise ValueError(f"{where}: num_levels must be >= 1, got {num_levels}")
    if not 0.0 <= eps < 1.0:
        raise ValueError(f"{where}: eps must be in [0, 1), got {eps}")


def masked_diffusion_bounds(
    denoise: Callable[[Integer[Tensor, "batch seq_len"]], Float[Tensor, "batch seq_len vocab"]],
    clean: Integer[Tensor, "batch seq_len"],
    supervised: Bool[Tensor, "batch seq_len"],
    sample_index: Integer[Tensor, " batch"],
    *,
    mask_token_id: int,
    num_levels: int,
    eps: float,
    seed: int,
    estimator: str = "time",
) -> Float[Tensor, " batch"]:
    """Each sample's NELBO numerator (see the module docstring), averaged over the
    ``num_levels`` levels: one ``denoise(noisy)`` call per level, ``noisy`` being ``clean``
    with the masked supervised tokens replaced by ``mask_token_id``."""
    keys = row_keys(seed, sample_index.to(clean.device))
    offsets = (supervised.long().cumsum(1) - 1).clamp(min=0)  # i-th supervised token -> i
    base = uniforms(keys, 0, Purpose.NOISE_LEVEL, 1)[:, 0]
    n = supervised.sum(1)
    total = torch.zeros(clean.shape[0], dtype=torch.float64, device=clean.device)
    for level in range(num_levels):
        u = stratified_levels(base, level, num_levels)
        draws = uniforms(keys, level, Purpose.NOISE_MASK, clean.shape[1]).gather(1, offsets)
        if estimator == "count":
            count = torch.minimum(torch.floor(u * n).long() + 1, n)
            rank = torch.where(supervised, draws, 2.0).argsort(1).argsort(1)  # among the supervised tokens
            masked = supervised & (rank < count[:, None])
            weight = n / count.clamp_min(1)
        else:
            t = (1.0 - eps) * u + eps
            masked = supervised & (draws < t[:, None])
            weight = 1.0 / t
        nll = per_token_nll(denoise(torch.where(masked, mask_token_id, clean)).float(), clean)
        total += torch.where(masked, nll, 0.0).sum(1).double() * weight.double()
    return total / num_levels


def denoiser_bounds(model: torch.nn.Module, batch: Mapping[str, Any], supervised: Bool[Tensor, "batch seq_len"], *,
                    mask_token_id: int, num_levels: int, eps: float, seed: int,
                    estimator: str = "time") -> Float[Tensor, " batch"]:
    """:func:`masked_diffusion_bounds` of a whole-canvas denoiser called as ``model(noisy,
    attention_mask=, positions=)`` (MDLM, MLM) on a batch with ``target_ids`` and
    ``sample_index``, over its ``supervised`` tokens."""
    def denoise(noisy: Tensor) -> Tensor:
        return model(noisy, attention_mask=batch.get("attention_mask"), positions=batch.get("positions"))

    return masked_diffusion_bounds(denoise, batch["target_ids"], supervised, batch["sample_index"],
                                   mask_token_id=mask_token_id, num_levels=num_levels, eps=eps, seed=seed,
                                   estimator=estimator)
