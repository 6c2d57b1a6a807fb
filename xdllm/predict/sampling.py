"""Token choice: the final per-position distribution and the token drawn from it.

The final distribution is ``softmax(logits / T)`` restricted to the top-k tokens and then to the
top-p nucleus (renormalised), with banned ids (:func:`never_generated_ids`: the mask, padding
and BOS tokens) removed. ``T`` is the temperature,
or 1 when the temperature is 0: temperature 0 means "take the argmax", and the distribution is
kept at T = 1 so that confidence scores stay meaningful. Sampling uses inverse-CDF lookup with
one externally supplied uniform per position (see ``xdllm.predict.streams``), so a draw depends
only on that uniform and on the distribution.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Float, Integer
from torch import Tensor

from xdllm.interfaces import Tokenizer

NUCLEUS_CANDIDATES = 1024  # logits the top-p set is first looked for among, on the CPU


def check_sampling_options(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Reject meaningless sampling settings up front, naming the offending option."""
    if not temperature >= 0.0:
        raise ValueError(f"temperature must be >= 0 (0 = argmax), got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p}")


def _keep_top_k(logits: Tensor, top_k: int) -> Tensor:
    """Keep logits at least as large as the k-th largest (ties at the boundary are all kept)."""
    kth = logits.topk(top_k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def _keep_top_p(logits: Tensor, top_p: float) -> Tensor:
    """Keep the smallest most-probable set whose mass reaches ``top_p`` (never empty), and any
    token tied with the least probable one kept.

    Sorting every position's whole vocabulary dominates a sampled step on the CPU (0.64 s for 256
    positions of a 32k vocabulary, one thread). There the set is first looked for among the
    :data:`NUCLEUS_CANDIDATES` largest logits (``topk``, 17 times cheaper), and only the
    positions whose set reaches past them are sorted in full: the same tokens either way, since
    both read the same leading values in the same order. On a GPU the sort is cheap and the
    check of which positions need it would cost a host synchronisation: every position is sorted.
    """
    log_total = logits.logsumexp(-1, keepdim=True)
    if logits.device.type != "cpu" or logits.shape[-1] <= NUCLEUS_CANDIDATES:
        threshold, _ = _nucleus_threshold(logits.sort(-1, descending=True).values, log_total, top_p)
    else:
        threshold, complete = _nucleus_threshold(logits.topk(NUCLEUS_CANDIDATES, dim=-1).values, log_total, top_p)
        if not bool(complete.all()):  # a CPU tensor: reading it is no device synchronisation
            beyond = ~complete
            threshold[beyond], _ = _nucleus_threshold(logits[beyond].sort(-1, descending=True).values,
                                                      log_total[beyond], top_p)
    return logits.masked_fill(logits < threshold, float("-inf"))


def _nucleus_threshold(descending: Tensor, log_total: Tensor, top_p: float) -> tuple[Tensor, Tensor]:
    """From the largest logits in descending order (all of them, or the leading ones) and the log
    of the whole softmax normaliser: the smallest logit the top-``top_p`` set keeps (``[..., 1]``)
    and whether the set ends among the given logits (``[...]``)."""
    probs = (descending - log_total).exp()
    kept = (probs.cumsum(-1) - probs < top_p).sum(-1, keepdim=True)  # the mass before a kept token < top_p
    return descending.gather(-1, kept - 1), kept.squeeze(-1) < descending.shape[-1]


def never_generated_ids(tokenizer: Tokenizer) -> tuple[int, ...]:
    """The ids a predictor never writes into an output: the mask, padding and BOS tokens, which
    no training target holds (one that is also the EOS token stays: outputs end with it)."""
    special = {tokenizer.mask_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id}
    return tuple(sorted(special - {tokenizer.eos_token_id}))


def final_distribution(logits: Float[Tensor, "*lead vocab"], temperature: float,
                       top_k: int | None, top_p: float | None,
                       banned_ids: Sequence[int]) -> Float[Tensor, "*lead vocab"]:
    """float32 probabilities the predictor draws from and scores confidence with."""
    logits = logits.to(torch.float32, copy=True)  # the one copy; everything after is in place
    if temperature > 0.0 and temperature != 1.0:
        logits.div_(temperature)
    if banned_ids:
        for token_id in banned_ids:  # scalar indices: no index tensor, no host-device copy
            logits[..., token_id] = float("-inf")
    if top_k is not None and top_k < logits.shape[-1]:
        logits = _keep_top_k(logits, top_k)
    if top_p is not None and top_p < 1.0:
        logits = _keep_top_p(logits, top_p)
    return logits.softmax(-1)


def choose_tokens(probs: Float[Tensor, "*lead vocab"],
                  draws: Float[Tensor, "*lead"] | None) -> Integer[Tensor, "*lead"]:
    """Argmax when ``draws`` is None (lowest id wins ties), else inverse-CDF sampling."""
    if draws is None:
        return probs.max(-1).indices
    cdf = probs.cumsum(-1)
    target = draws * cdf[..., -1]
    index = torch.searchsorted(cdf, target[..., None], right=True)[..., 0]  # entries <= target
    return index.clamp(max=probs.shape[-1] - 1)
