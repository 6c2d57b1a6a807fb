"""``best.ckpt``: Lightning's ``ModelCheckpoint`` keeping one checkpoint, the newer one on a tie.

Lightning replaces the best checkpoint only on a strict improvement, so when the monitored
metric ties (``val/exact_match`` is 0.0 at every early validation of a small split, say)
``best.ckpt`` stays at the first of them, however much training came after. Here a tie counts as
at least as good, and the newer checkpoint, trained longer, is kept.
"""

from __future__ import annotations

from typing import Optional

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
