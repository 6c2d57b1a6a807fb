"""An exponential moving average of a model's trainable weights (``optim.ema_decay``).

After optimizer step ``n`` (1, 2, ...) every average moves towards its weight:
``average <- average + (1 - d_n) * (weight - average)`` with ``d_n = min(ema_decay, (1 + n) /
(10 + n))``, so that early averages follow the weights instead of holding on to the random
initialisation. The averages are float32 whatever the weights' dtype (a bf16 average could not
take steps of ``1 - 0.9999``) and live on the weights' device; one fused ``lerp`` per step, no
host synchronisation.

Validation, and so the choice of ``best.ckpt``, runs on the averaged weights (:meth:`apply` /
:meth:`restore` around it); checkpoints carry the averages beside the trained weights, and
``xdllm generate`` / ``eval`` use them (``ema=false``: the trained weights).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

CHECKPOINT_KEY = "xdllm_weight_average"
"""The checkpoint entry holding the averages: ``{"decay", "updates", "weights": {name: tensor}}``."""


def effective_decay(decay: float, updates: int) -> float:
    """The decay of the ``updates``-th update (counted from 1)."""
    return min(decay, (1 + updates) / (10 + updates))


class WeightAverage:
    """The moving average of ``model``'s trainable parameters (names as in its state dict)."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"optim.ema_decay must be in [0, 1) or null, got {decay}")
        self.decay = decay
        self.updates = 0
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self.names = [name for name, _ in named]
        self.parameters = [p for _, p in named]
        # a parameter shared under several names (tied weights) is averaged once, saved under each
        index = {id(p): i for i, p in enumerate(self.parameters)}
        self.aliases = {name: index[id(p)] for name, p in model.named_parameters(remove_duplicate=False)
                        if id(p) in index}
        self.averages = [p.detach().to(torch.float32, copy=True) for p in self.parameters]
        self._trained: list[Tensor] | None = None

    @torch.no_grad()
    def update(self) -> None:
        """Move the averages towards the current weights (after an optimizer step)."""
        self.updates += 1
        weights = [p.detach() if p.dtype == torch.float32 else p.detach().float() for p in self.parameters]
        torch._foreach_lerp_(self.averages, weights, 1.0 - effective_decay(self.decay, self.updates))

    @torch.no_grad()
    def apply(self) -> None:
        """Put the averages into the model, keeping the trained weights aside for :meth:`restore`."""
        if self._trained is not None:
            raise RuntimeError("WeightAverage.apply: the averages are in the model already")
        self._trained = [p.detach().clone() for p in self.parameters]
        for parameter, average in zip(self.parameters, self.averages):
            parameter.copy_(average)

    @torch.no_grad()
    def restore(self) -> None:
        """Put the trained weights back (after :meth:`apply`)."""
        if self._trained is None:
            raise RuntimeError("WeightAverage.restore: apply() was not called")
        for parameter, trained in zip(self.parameters, self._trained):
            parameter.copy_(trained)
        self._trained = None

    @property
    def applied(self) -> bool:
        return self._trained is not None

    def state(self) -> dict:
        """The checkpoint entry: the averages on the CPU, by parameter name."""
        on_cpu = [average.detach().cpu() for average in self.averages]
        return {"decay": self.decay, "updates": self.updates,
                "weights": {name: on_cpu[i] for name, i in self.aliases.items()}}

    @torch.no_grad()
    def load_state(self, state: Mapping) -> None:
        """Continue from a checkpoint entry (resume); its names must be this model's."""
        weights = state["weights"]
        if sorted(weights) != sorted(self.aliases):
            missing = sorted(set(self.aliases) - set(weights))
            extra = sorted(set(weights) - set(self.aliases))
            raise ValueError(f"the checkpoint's weight averages do not fit this model (missing: {missing[:5]}, "
                             f"unknown: {extra[:5]})")
        for name, average in zip(self.names, self.averages):
            average.copy_(weights[name])
        self.updates = int(state["updates"])


def averaged_state_dict(model_state: Mapping[str, Tensor], checkpoint: Mapping) -> dict[str, Tensor]:
    """``model_state`` (a model's state dict) with its trainable weights replaced by the
    checkpoint's averages, where the checkpoint has them."""
    entry = checkpoint.get(CHECKPOINT_KEY)
    if entry is None:
        return dict(model_state)
    return {**model_state, **entry["weights"]}
