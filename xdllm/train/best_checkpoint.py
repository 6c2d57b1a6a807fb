"""``best.ckpt``: Lightning's ``ModelCheckpoint`` keeping one checkpoint, the newer one on a tie.

Lightning replaces the best checkpoint only on a strict improvement, so when the monitored
metric ties (``val/exact_match`` is 0.0 at every early validation of a small split, say)
``best.ckpt`` stays at the first of them, however much training came after. Here a tie counts as
at least as good, and the newer checkpoint, trained longer, is kept.

A restored state whose best checkpoint file is gone (moved aside by a resume from before it,
:mod:`xdllm.run.rewind`, or deleted) is forgotten: the next validation writes ``best.ckpt``,
rather than only one that beats a score no file holds any more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import Tensor


class NewestOnTieCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose single best checkpoint is replaced on a tie as well."""

    def check_monitor_top_k(self, trainer: L.Trainer, current: Optional[Tensor] = None) -> bool:
        if current is None or self.save_top_k != 1 or not self.best_k_models:
            return super().check_monitor_top_k(trainer, current)
        at_least_as_good = {"min": torch.le, "max": torch.ge}[self.mode]
        decision = bool(at_least_as_good(current, self.best_k_models[self.kth_best_model_path]))
        return trainer.strategy.reduce_boolean_decision(decision)  # every process decides alike

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        fresh = {name: getattr(self, name) for name in _BEST_STATE}
        super().load_state_dict(state_dict)
        if self.best_model_path and not Path(self.best_model_path).exists():
            for name, value in fresh.items():
                setattr(self, name, value)


_BEST_STATE = ("best_model_score", "best_model_path", "best_k_models", "kth_best_model_path", "kth_value")
"""What ``ModelCheckpoint`` restores about its best checkpoint."""
