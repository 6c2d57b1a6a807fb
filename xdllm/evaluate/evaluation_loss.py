"""The family loss as evaluation calls it: ``(model, batch) -> LossDict``.

Validation, the preflight and ``xdllm eval`` hand evaluators this form of the loss. A loss that
takes a context gets the frozen models and no global counts (each batch is normalised by its
own); every other attribute is the loss's own, so an evaluator can read the loss's
``token_counts`` to weigh each batch by the count its loss averages over.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from xdllm.interfaces import LossContext, LossDict, LossFunction


def takes_context(loss_fn: LossFunction) -> bool:
    """Whether the loss is called with ``context=``: it has a ``context`` parameter (on
    ``forward`` for an ``nn.Module`` loss, else on ``__call__``)."""
    call = loss_fn.forward if isinstance(loss_fn, torch.nn.Module) else loss_fn.__call__
    return "context" in inspect.signature(call).parameters


class EvaluationLoss:
    """``loss_fn`` called as ``(model, batch)``, handed ``frozen`` when it takes a context."""

    def __init__(self, loss_fn: LossFunction, frozen: Mapping[str, torch.nn.Module] | None = None) -> None:
        self.loss_fn = loss_fn
        self.context = LossContext(frozen=dict(frozen or {})) if takes_context(loss_fn) else None

    def __call__(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> LossDict:
        if self.context is None:
            return self.loss_fn(model, batch)
        return self.loss_fn(model, batch, context=self.context)

    def __getattr__(self, name: str) -> Any:
        if name in ("loss_fn", "context"):  # not set yet (copying, unpickling)
            raise AttributeError(name)
        return getattr(self.loss_fn, name)


def batch_token_counts(loss_fn: LossFunction, batch: Mapping[str, Any]) -> Mapping[str, Tensor] | None:
    """The loss's ``token_counts`` of this batch (what it averages over), or None for a loss that
    has none (it normalises each batch its own way)."""
    token_counts = getattr(loss_fn, "token_counts", None)
    return None if token_counts is None else token_counts(batch)

