"""The evaluator of a masked-diffusion family with a likelihood bound (MDLM, BD3-LM)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float, Integer
from torch import Tensor

from xdllm.evaluate.answers import AnswerEvaluator
from xdllm.evaluate.bounds import through_first_eos, with_perplexities
from xdllm.interfaces import LossFunction, MetricSums


class BoundEvaluator(AnswerEvaluator):
    """:class:`AnswerEvaluator` plus the family's NELBO estimate on the loss loader:
    ``nll_bound`` per supervised token and ``text_nll_bound`` per text token (through each
    response's first EOS, leaving out an EOS fill), and :meth:`finalize` adds ``ppl_bound`` and
    ``text_ppl_bound``. A subclass gives :meth:`sample_bounds`, each sample's bound."""

    def sample_bounds(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> Float[Tensor, " batch"]:
        raise NotImplementedError(f"{type(self).__name__} must define sample_bounds(model, batch)")

    def bound_sum(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> Float[Tensor, ""]:
        """The batch's bound summed over its samples."""
        return self.sample_bounds(model, batch).sum()

    def sample_nll(self, model: torch.nn.Module, batch: Mapping[str, Any]
                   ) -> tuple[Float[Tensor, " batch"], Integer[Tensor, " batch"]]:
        """Each sample's bound on ``-log p(response | prompt)`` (nats, the whole response) and its
        text tokens (through the first EOS): what ``xdllm eval`` ranks answer choices by."""
        text = through_first_eos(batch["target_ids"], batch["loss_mask"] != 0, self.tokenizer.eos_token_id)
        return self.sample_bounds(model, batch), text.sum(1)

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        sums = dict(super().loss_metrics(model, batch, loss_fn))
        supervised = batch["loss_mask"] != 0
        bound = self.bound_sum(model, batch)
        text = through_first_eos(batch["target_ids"], supervised, self.tokenizer.eos_token_id)
        sums["nll_bound"] = (bound, supervised.sum().double())
        sums["text_nll_bound"] = (bound, text.sum().double())
        return sums

    def finalize(self, means: Mapping[str, float]) -> dict[str, float]:
        return with_perplexities(means, [("nll_bound", "ppl_bound"), ("text_nll_bound", "text_ppl_bound")])
