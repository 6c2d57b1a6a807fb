"""Lightning's learning-rate monitor at the step numbers every other scalar uses."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import LearningRateMonitor


class StepLearningRateMonitor(LearningRateMonitor):
    """Lightning's learning-rate monitor, logging the rate of optimizer step ``n`` (read just
    before the step) at step ``n``, as every other scalar, not at ``n - 1``."""

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if self.logging_interval == "epoch" or not trainer._logger_connector.should_update_logs:
            return
        stats = self._extract_stats(trainer, "step" if self.logging_interval is None else "any")
        for logger in trainer.loggers if stats else ():
            logger.log_metrics(stats, step=trainer.global_step + 1)
