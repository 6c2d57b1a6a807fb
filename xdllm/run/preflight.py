"""Before a run writes anything: the loss reads what the collators make.

Config groups of different families can compose into a config whose collator makes batches the
loss cannot read (``model=arlm collator=packed_mlm``: no ``loss_mask``). Without this check such a
run writes its directory, then fails inside the first training step with a ``KeyError``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from xdllm.errors import XdllmError
from xdllm.interfaces import Example
from xdllm.nn.transformer import backend_log_deferred
from xdllm.train.module import DiffusionLMModule


def check_loss_reads_collated_batches(module: DiffusionLMModule, collators: dict, examples: Sequence[Example],
                                      family: str) -> None:
    """Collate ``examples`` with the train and val collators and evaluate the loss once on each
    (eval mode, no gradients); a batch key the loss looks for and does not find is one error
    naming the loss, the collator and the key."""
    model = module.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), backend_log_deferred(model):
            for role in ("train", "val"):
                batch = collators[role](list(examples))
                try:
                    module.call_loss(model, batch)
                except KeyError as error:
                    raise XdllmError(
                        f"the loss {type(module.loss_fn).__name__} looks for {error} in the batches of collator.{role} "
                        f"({type(collators[role]).__name__}), which makes {', '.join(sorted(batch))}: the model family "
                        f"is {family}; do the config groups chosen (collator=, model=) belong to it?") from error
    finally:
        model.train(was_training)
