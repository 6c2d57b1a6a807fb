"""MDLM validation: the ELBO bound on held-out samples, and exact match where there are answers.

The bound is the masked-diffusion NELBO of the linear schedule per supervised token, with ``K``
stratified levels per sample (:mod:`xdllm.evaluate.bounds`): an upper bound on the NLL per
token (nats), whose exponential bounds the perplexity. It does not depend on the batch
composition or padding, and repeats exactly. ``text_nll_bound`` divides the same sum by the
tokens through each response's first EOS, leaving out an EOS fill to whole blocks
(``collator.block_size``) or to ``collator.target_length``: the fill's terms are not negative,
so it still bounds the NLL per text token, and it compares across fills. Without a fill the two
are equal.

The denoiser is bidirectional and the attention mask shows it where each row ends, so the
bound is one on ``-log p(response | prompt, canvas length)``: without a fill it leaves out the
cost of the length, which an autoregressive model pays at its EOS (a model that reads the length
off the mask gets a bound of 0 on answers whose only uncertainty is their length;
``tests/mdlm/test_mdlm_loss_and_bound.py``). With ``collator.target_length`` every canvas has the
same length, the EOS fill is scored, and ``text_nll_bound`` bounds ``-log p(response | prompt)``
per text token: the setting for a likelihood comparison with ARLM, BD3-LM or the hybrid (whose
blocks never see where the row ends).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from xdllm.evaluate.bound_evaluator import BoundEvaluator
from xdllm.evaluate.bounds import check_bound_options, denoiser_bounds
from xdllm.interfaces import Tokenizer


class MDLMEvaluator(BoundEvaluator):
    """``loss`` (the training objective), ``nll_bound`` and ``ppl_bound`` (per supervised token),
    ``text_nll_bound`` and ``text_ppl_bound`` (per text token, through the first EOS) on the loss
    loader; exact match and token accuracy of generated answers on the prediction loader.

    Args:
        tokenizer: mask, pad and eos ids.
        num_levels: noise levels ``K`` per sample (forward passes per batch).
        eps: smallest masking level (as in training).
        seed: seed of the noise streams.
        estimator: ``"time"`` (each token masked with probability ``t``, weighed by ``1/t``) or
            ``"count"`` (exactly ``l`` tokens masked, weighed by ``n/l``): the same expectation,
            a smaller spread for ``count`` (:mod:`xdllm.evaluate.bounds`).
    """

    def __init__(self, tokenizer: Tokenizer, num_levels: int = 4, eps: float = 1e-3, seed: int = 0,
                 estimator: str = "time") -> None:
        super().__init__(tokenizer)
        check_bound_options(type(self).__name__, num_levels, eps, estimator)
        self.estimator = estimator
        self.num_levels = num_levels
        self.eps = eps
        self.seed = seed

    def sample_bounds(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> Float[Tensor, " batch"]:
        """Each sample's bound numerator, averaged over the ``K`` levels."""
        return denoiser_bounds(model, batch, batch["loss_mask"] != 0, mask_token_id=self.tokenizer.mask_token_id,
                               num_levels=self.num_levels, eps=self.eps, seed=self.seed, estimator=self.estimator)
