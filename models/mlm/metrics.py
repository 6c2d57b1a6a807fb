"""MLM evaluation: :class:`~xdllm.evaluate.AnswerEvaluator`'s validation figures (loss, exact
match, token accuracy), plus a likelihood bound of each sample's answer for ``xdllm eval``'s
multiple-choice scoring.

An MLM is a denoiser of masked tokens like MDLM's, trained without MDLM's ``1/t`` weighting, and
the masked-diffusion NELBO (:mod:`xdllm.evaluate.bounds`) bounds the NLL of the generative model
any such denoiser defines (unmask as the reverse process, the denoiser's distribution at each
reveal): the bound is valid for it, only possibly looser than for a model trained on it.
Validation does not compute it (its figures stay those of :class:`AnswerEvaluator`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float, Integer
from torch import Tensor

from xdllm.evaluate import AnswerEvaluator
from xdllm.evaluate.bounds import check_bound_options, denoiser_bounds, through_first_eos
from xdllm.interfaces import Tokenizer


class MLMEvaluator(AnswerEvaluator):
    """:class:`AnswerEvaluator` and :meth:`sample_nll`.

    Args:
        tokenizer: mask and eos ids.
        num_levels: noise levels ``K`` per sample of the bound (forward passes per batch).
        eps: smallest masking level.
        seed: seed of the noise streams.
        estimator: ``"time"`` or ``"count"``, as :class:`~xdllm_models.mdlm.metrics.MDLMEvaluator`
            takes it.
        loss_weight: as :class:`AnswerEvaluator` takes it.
    """

    def __init__(self, tokenizer: Tokenizer, num_levels: int = 4, eps: float = 1e-3, seed: int = 0,
                 estimator: str = "time", loss_weight: str | None = None) -> None:
        super().__init__(tokenizer, loss_weight)
        check_bound_options(type(self).__name__, num_levels, eps, estimator)
        self.estimator = estimator
        self.num_levels = num_levels
        self.eps = eps
        self.seed = seed

    def sample_nll(self, model: torch.nn.Module, batch: Mapping[str, Any]
                   ) -> tuple[Float[Tensor, " batch"], Integer[Tensor, " batch"]]:
        """Each sample's masked-diffusion bound on ``-log p(answer | prompt)`` (nats, its
        supervised tokens) and its tokens through the first EOS, from a batch of the
        prompt/answer collators (one sample per row, with ``supervised_mask``)."""
        if "supervised_mask" not in batch or "sample_index" not in batch:
            raise ValueError("MLMEvaluator: the likelihood bound needs one sample per row with its supervised tokens "
                             "(supervised_mask) and sample_index, as the prompt/answer collators give; this val "
                             "collator gives packed rows")
        supervised = batch["supervised_mask"]
        bounds = denoiser_bounds(model, batch, supervised, mask_token_id=self.tokenizer.mask_token_id,
                                 num_levels=self.num_levels, eps=self.eps, seed=self.seed, estimator=self.estimator)
        return bounds, through_first_eos(batch["target_ids"], supervised, self.tokenizer.eos_token_id).sum(1)
