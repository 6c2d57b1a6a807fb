"""Hybrid validation: the training objective, the causal branch's exact NLL and perplexity, the
diffusion branch's ELBO bound; exact match and token accuracy where samples have answers.

Both likelihood metrics are per response token through the first EOS (the block fill after it
is not counted), so they compare with ARLM's ``val/nll`` and MDLM's ``val/nll_bound`` on the
same samples.

The diffusion bound is the block-diffusion NELBO: each block is a masked-diffusion model of its
tokens given the clean blocks before it, so ``-log p(x) <= Σ_blocks E_t[Σ_{masked} -log p / t]``.
It is estimated as MDLM's is (:func:`xdllm.evaluate.bounds.masked_diffusion_bounds`): ``K``
stratified levels per sample, ``t = (1 - eps) u + eps``, every supervised token masked with
probability ``t``, all from counter-based streams keyed by ``(seed, sample_index)``; one
level per sample serves all its blocks (each block's term is still an unbiased estimate). The
bound covers the block fill too; the fill's NLL is not negative, so divided by the tokens
through the first EOS it still bounds their NLL per token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float, Integer
from torch import Tensor

from xdllm.evaluate import AnswerEvaluator
from xdllm.evaluate.bounds import masked_diffusion_bounds, through_first_eos, with_perplexities
from xdllm.evaluate.causal_nll import causal_response_nll
from xdllm.evaluate.totals import count_weighted, with_total_loss
from xdllm.interfaces import LossFunction, MetricSums, Tokenizer
from xdllm.losses.token_nll import next_token_nll
from xdllm_models.hybrid.loss import AR_COUNT, DIFFUSION_COUNT, HybridLoss

TERMS = ("diffusion_loss", "ar_loss")


class HybridEvaluator(AnswerEvaluator):
    """On the loss loader: ``loss`` (the training objective over the whole split: the sum of its
    terms ``diffusion_loss`` and ``ar_loss``, each the exact mean over its tokens), and
    ``nll`` (the causal branch's exact NLL per token over the whole split, nats), all from one
    forward over ``[x_t | x_0]``; with ``num_levels > 0`` also ``diffusion_nll_bound`` (``K``
    more forwards). :meth:`finalize` adds ``ppl = exp(nll)`` and ``diffusion_ppl_bound``. On the
    prediction loader: exact match and token accuracy of generated answers.

    Args:
        tokenizer: mask, pad and eos ids.
        block_size, alpha: as in :class:`~xdllm_models.hybrid.loss.HybridLoss` (the training loss).
        num_levels: noise levels ``K`` per sample for the diffusion bound (0: no bound).
        eps: smallest masking level (as in training).
        seed: seed of the noise streams.
    """

    def __init__(self, tokenizer: Tokenizer, block_size: int, alpha: float = 1.0, num_levels: int = 4,
                 eps: float = 1e-3, seed: int = 0) -> None:
        super().__init__(tokenizer)
        if num_levels < 0:
            raise ValueError(f"HybridEvaluator: num_levels must be >= 0, got {num_levels}")
        if not 0.0 <= eps < 1.0:
            raise ValueError(f"HybridEvaluator: eps must be in [0, 1), got {eps}")
        self.loss = HybridLoss(block_size=block_size, alpha=alpha)
        self.num_levels = num_levels
        self.eps = eps
        self.seed = seed

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        logits = self.loss.branch_logits(model, batch)
        terms = self.loss.objective_terms(logits, batch)
        nll, counted = self._causal_nll(logits.causal, batch)
        tokens = counted.sum().double()
        counts = self.loss.token_counts(batch)
        sums = {"diffusion_loss": count_weighted(terms.dllm_loss, counts[DIFFUSION_COUNT]),
                "ar_loss": count_weighted(terms.total_loss - terms.dllm_loss, counts[AR_COUNT]),
                "nll": (nll.sum().double(), tokens)}
        if self.num_levels > 0:
            sums["diffusion_nll_bound"] = (self.bound_sum(model, batch), tokens)
        return sums

    def _causal_nll(self, causal_logits: Tensor, batch: Mapping[str, Any]) -> tuple[Tensor, Tensor]:
        """The causal branch's NLL of each counted token (``[batch, seq_len - 1]``, zero
        elsewhere) and the counted tokens (``[batch, seq_len]``: through the first EOS)."""
        counted = through_first_eos(batch["target_ids"], batch["loss_mask"] != 0, self.tokenizer.eos_token_id)
        nll = torch.where(counted[:, 1:], next_token_nll(causal_logits.float(), batch["target_ids"]), 0.0)
        return nll, counted

    def sample_nll(self, model: torch.nn.Module, batch: Mapping[str, Any]
                   ) -> tuple[Float[Tensor, " batch"], Integer[Tensor, " batch"]]:
        """Each sample's exact ``-log p(response | prompt)`` under the causal branch (nats,
        through the first EOS) and its tokens: what ``xdllm eval`` ranks answer choices by; from
        a causal forward of the clean row alone, which gives the joint forward's causal logits."""
        counted = through_first_eos(batch["target_ids"], batch["loss_mask"] != 0, self.tokenizer.eos_token_id)
        return causal_response_nll(model, batch["target_ids"], counted, batch["attention_mask"], batch["positions"])

    def bound_sum(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> Float[Tensor, ""]:
        """``Σ_samples`` of the block-diffusion NELBO numerator, averaged over the ``K`` levels."""
        def denoise(noisy: Tensor) -> Tensor:
            return model.branches(noisy, batch["target_ids"], batch["attention_mask"], batch["positions"],
                                  self.loss.block_size).diffusion

        return masked_diffusion_bounds(denoise, batch["target_ids"], batch["loss_mask"] != 0,
                                       batch["sample_index"], mask_token_id=self.tokenizer.mask_token_id,
                                       num_levels=self.num_levels, eps=self.eps, seed=self.seed).sum()

    def finalize(self, means: Mapping[str, float]) -> dict[str, float]:
        return with_perplexities(with_total_loss(means, TERMS),
                                 [("nll", "ppl"), ("diffusion_nll_bound", "diffusion_ppl_bound")])

