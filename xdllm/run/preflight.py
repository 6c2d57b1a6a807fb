"""Before a run writes anything: the loss reads what the collators make, and returns what the
training step reads (:class:`~xdllm.interfaces.LossDict`).

A collator of another family, named directly or written by a user, can make batches the loss
cannot read (``model=arlm`` with the MLM's collator: no ``loss_mask``; collator groups of another
family fail earlier, on the knobs they interpolate). Without this check such a
run writes its directory, then fails inside the first training step with a ``KeyError``.

And a model that exposes ``final_hidden`` and ``lm_head_weight`` gives the logits its ``forward``
gives: the losses and predictors project ``final_hidden`` themselves where a model has both (only
the positions they read, :mod:`xdllm.losses.chunked`), so a change made to ``forward`` alone (a
bias on the head, a temperature, another head), as a researcher editing a copied family makes
it, would train and generate as if it were not there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from xdllm.data.named_collate import NamedCollate
from xdllm.errors import XdllmError
from xdllm.interfaces import Example
from xdllm.nn.transformer import backend_log_deferred
from xdllm.train.module import DiffusionLMModule


def check_loss_reads_collated_batches(module: DiffusionLMModule, collators: dict, examples: Sequence[Example],
                                      family: str, scores_losses: bool) -> None:
    """Collate ``examples`` with the train and val collators and evaluate the loss once on each
    (eval mode, no gradients); a batch key the loss looks for and does not find is one error
    naming the loss, the collator and the key. ``scores_losses`` (validation has a ``loss``
    loader): the evaluator's loss metrics are computed once on the val batch too, so that what
    it cannot score fails now, not at the first validation."""
    model = module.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), backend_log_deferred(model):
            for role in ("train", "val"):
                batch = NamedCollate(collators[role], f"collator.{role}")(list(examples))
                try:
                    out = module.call_loss(model, batch)
                except KeyError as error:
                    raise XdllmError(
                        f"the loss {type(module.loss_fn).__name__} looks for {error} in the batches of collator.{role} "
                        f"({type(collators[role]).__name__}), which makes {', '.join(sorted(batch))}: the model family "
                        f"is {family}; do the config groups chosen (collator=, model=) belong to it?") from error
                check_loss_output(out, type(module.loss_fn).__name__)
                if role == "val":
                    check_forward_matches_projection(model, batch["input_ids"])
                    if scores_losses:
                        try:
                            module.evaluator.loss_metrics(model, batch, module.evaluation_loss)
                        except (KeyError, ValueError) as error:
                            raise XdllmError(f"the evaluator {type(module.evaluator).__name__} cannot score the "
                                             f"loss on the batches of collator.val: {error}") from error
    finally:
        model.train(was_training)


def check_forward_matches_projection(model: torch.nn.Module, input_ids: torch.Tensor) -> None:
    """For a model with ``final_hidden`` and ``lm_head_weight``: ``model(ids)`` must equal
    ``final_hidden(ids)`` projected by ``lm_head_weight`` (rounding aside), on ``input_ids``."""
    if not (hasattr(model, "final_hidden") and hasattr(model, "lm_head_weight")):
        return
    name = type(model).__name__
    logits = model(input_ids)
    projected = torch.nn.functional.linear(model.final_hidden(input_ids), model.lm_head_weight)
    if not isinstance(logits, torch.Tensor) or logits.shape != projected.shape:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        difference = f"forward returns {got}, the projection {tuple(projected.shape)}"
    elif torch.allclose(logits.float(), projected.float(), rtol=(tolerance := _rounding(logits.dtype)), atol=tolerance):
        return
    else:
        difference = f"they differ by up to {(logits.float() - projected.float()).abs().max().item():.4g}"
    raise XdllmError(
        f"{name}.forward does not give the logits of {name}.final_hidden projected by {name}.lm_head_weight "
        f"({difference}): xdllm's losses, predictors and evaluators project final_hidden themselves where a model "
        "has both, so what forward does beyond that would be ignored. Make the change in final_hidden or "
        "lm_head_weight (docs/model_families.md, 'The package')")


def _rounding(dtype: torch.dtype) -> float:
    """How far two computations of the same logits may differ in ``dtype`` (a compiled network's
    kernels round otherwise than the eager ones)."""
    return 1e-3 if dtype in (torch.float32, torch.float64) else 5e-2


def _scalar(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.numel() == 1


def check_loss_output(out: Any, loss_name: str) -> None:
    """The training step back-propagates ``out["loss"]`` and logs every entry: ``out`` must be a
    mapping with ``loss``, a floating-point scalar tensor, and only scalar tensors besides."""
    keys = ", ".join(map(str, out)) if isinstance(out, Mapping) else None
    problem = None
    if keys is None:
        problem = f"returned a {type(out).__name__}, not a dict"
    elif "loss" not in out:
        problem = f"returned the keys {keys or '(none)'}, without 'loss'"
    elif not (_scalar(out["loss"]) and out["loss"].is_floating_point()):
        problem = "returned a 'loss' that is not a floating-point scalar tensor"
    elif other := [str(name) for name, value in out.items() if not _scalar(value)]:
        problem = f"returned {', '.join(other)}, which are not scalar tensors"
    if problem:
        raise XdllmError(f"the loss {loss_name} {problem}: a loss must return a dict with 'loss' (a floating-point "
                         "scalar tensor, back-propagated) and any other scalar tensors to log "
                         "(xdllm.interfaces.LossDict)")
