"""ARLM validation: the NLL per supervised token and its perplexity; exact match where there are answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float, Integer
from torch import Tensor

from xdllm.evaluate import AnswerEvaluator
from xdllm.evaluate.bounds import through_first_eos, with_perplexities
from xdllm.interfaces import LossFunction, MetricSums, Tokenizer
from xdllm_models.arlm.loss import ARLMLoss


class ARLMEvaluator(AnswerEvaluator):
    """On the loss loader, from one forward pass per batch: ``nll``, the exact NLL per supervised
    token over the whole split (nats; EOS included), with ``ppl = exp(nll)`` added by
    :meth:`finalize`, and ``loss``, the same mean (the family loss is that mean within a batch,
    so the split's loss is exact whatever the batch split).
    On the prediction loader: exact match and token accuracy of generated answers.

    Both come from :meth:`ARLMLoss.token_nll <xdllm_models.arlm.loss.ARLMLoss.token_nll>`
    (``loss`` is what the family loss returns without a context), so the harness's
    ``loss_fn`` is not called: one forward pass gives both.
    """

    def __init__(self, tokenizer: Tokenizer, fp32_upcast: bool = True) -> None:
        super().__init__(tokenizer)
        self.loss = ARLMLoss(fp32_upcast=fp32_upcast)

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        nll, supervised = self.loss.token_nll(model, batch)
        total = torch.where(supervised, nll, 0.0).sum().double()
        count = supervised.sum().double()
        return {"loss": (total, count), "nll": (total, count)}

    def sample_nll(self, model: torch.nn.Module, batch: Mapping[str, Any]
                   ) -> tuple[Float[Tensor, " batch"], Integer[Tensor, " batch"]]:
        """Each sample's exact ``-log p(response | prompt)`` (nats, every supervised token) and its
        text tokens (through the first EOS): what ``xdllm eval`` ranks answer choices by."""
        nll, supervised = self.loss.token_nll(model, batch)
        text = through_first_eos(batch["input_ids"][:, 1:], supervised, self.tokenizer.eos_token_id)
        return torch.where(supervised, nll, 0.0).sum(1).double(), text.sum(1)

    def finalize(self, means: Mapping[str, float]) -> dict[str, float]:
        return with_perplexities(means, [("nll", "ppl")])
