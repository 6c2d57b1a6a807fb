"""Before a run writes anything: the loss reads what the collators make, and returns what the
training step reads (:class:`~xdllm.interfaces.LossDict`).

A collator of another family, named directly or written by a user, can make batches the loss
cannot read (``model=arlm`` with the MLM's collator: no ``loss_mask``; collator groups of another
family fail earlier, on the knobs they interpolate). Without this check such a
run writes its directory, then fails inside the first training step with a ``KeyError``.
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
                if role == "val" and scores_losses:
                    try:
                        module.evaluator.loss_metrics(model, batch, module.evaluation_loss)
                    except (KeyError, ValueError) as error:
                        raise XdllmError(f"the evaluator {type(module.evaluator).__name__} cannot score the loss "
                                         f"on the batches of collator.val: {error}") from error
    finally:
        model.train(was_training)


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
