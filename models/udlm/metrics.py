"""UDLM validation: the training objective and its two terms, the encoder's exact NLL of the
responses; exact match and token accuracy where samples have answers
(:class:`~xdllm.evaluate.AnswerEvaluator`).

The encoder is a causal language model of the clean row (``[bos] + prompt + response``), trained
by the loss's next-token term; in the training forward over ``[canvas | encoder row]`` its tokens
see only encoder tokens before them, so a causal forward of the row alone gives the same
next-token distributions. Its NLL of each response, through the first EOS (the block fill after
it is not counted), is exact, like the hybrid's causal branch: ``val/nll`` and ``val/ppl``
compare with ARLM's on the same samples, and multiple-choice questions are ranked by it
(``sample_nll``). It means nothing when the encoder was not trained as a language model
(``udlm.encoder_weight=0``): then it is neither reported nor given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Float, Integer
from torch import Tensor

from xdllm.evaluate import AnswerEvaluator
from xdllm.evaluate.bounds import through_first_eos, with_perplexities
from xdllm.evaluate.causal_nll import causal_response_nll
from xdllm.evaluate.evaluation_loss import batch_token_counts
from xdllm.evaluate.totals import count_weighted, with_total_loss
from xdllm.interfaces import LossFunction, MetricSums, Tokenizer
from xdllm_models.udlm.loss import CANVAS_COUNT, ENCODER_COUNT

TERMS = ("diffusion_loss", "encoder_loss")


class UDLMEvaluator(AnswerEvaluator):
    """On the loss loader: the loss's two shares, ``diffusion_loss`` (flat CE over the canvas)
    and ``encoder_loss`` (``encoder_weight ·`` the encoder's next-token CE), each the exact mean
    over its tokens in the split, and their sum ``loss`` (the training objective); with an
    encoder trained as a language model (``encoder_weight > 0``) also ``nll``, the encoder's
    exact NLL per response token through the first EOS, and :meth:`finalize` its ``ppl``. On the
    prediction loader: exact match and token accuracy of generated answers.

    Args:
        tokenizer: pad and eos ids.
        encoder_weight: the training loss's (``udlm.encoder_weight``): 0 means the encoder has
            no likelihood to report.
    """

    def __init__(self, tokenizer: Tokenizer, encoder_weight: float = 1.0) -> None:
        super().__init__(tokenizer)
        if not encoder_weight >= 0.0:
            raise ValueError(f"UDLMEvaluator: encoder_weight must be >= 0, got {encoder_weight}")
        self.encoder_weight = encoder_weight

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        terms = loss_fn(model, batch)
        counts = batch_token_counts(loss_fn, batch)
        sums = {"diffusion_loss": count_weighted(terms["diffusion_loss"], counts[CANVAS_COUNT]),
                "encoder_loss": count_weighted(terms["encoder_loss"], counts[ENCODER_COUNT])}
        if self.encoder_weight > 0:
            nll, tokens = self.sample_nll(model, batch)
            sums["nll"] = (nll.sum(), tokens.sum().double())
        return sums

    def sample_nll(self, model: torch.nn.Module, batch: Mapping[str, Any]
                   ) -> tuple[Float[Tensor, " batch"], Integer[Tensor, " batch"]]:
        """Each sample's exact ``-log p(response | prompt)`` under the encoder (nats, through
        the first EOS) and its tokens: what ``xdllm eval`` ranks answer choices by."""
        if self.encoder_weight == 0:
            raise ValueError("this udlm run trained its encoder with udlm.encoder_weight=0, not as a language "
                             "model: it has no likelihood of a response to report")
        counted = through_first_eos(batch["input_ids"], batch["loss_mask"] != 0, self.tokenizer.eos_token_id)
        return causal_response_nll(model, batch["input_ids"], counted, batch["attention_mask"], batch["positions"])

    def finalize(self, means: Mapping[str, float]) -> dict[str, float]:
        return with_perplexities(with_total_loss(means, TERMS), [("nll", "ppl")])
