"""The model at the start of training, in one log line:

    model RotaryTransformerMLMModel: 799 K parameters (799 K trainable), 3.2 MB

It stands in for Lightning's summary table, whose FLOPs column and ``Total FLOPs`` read 0 unless
the module carries an example input, and whose one row (xdllm's module holds one model) repeats
the totals below it.
"""

from __future__ import annotations

import logging

import lightning as L
from lightning.pytorch.utilities.model_summary.model_summary import get_human_readable_count

log = logging.getLogger(__name__)


class ModelSizeLine(L.Callback):
    """Logs the model's class, its parameter counts and their size once, on the first process."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        parameters = list(pl_module.parameters())
        total = sum(p.numel() for p in parameters)
        trainable = sum(p.numel() for p in parameters if p.requires_grad)
        megabytes = sum(p.numel() * p.element_size() for p in parameters) / 1e6
        log.info("model %s: %s parameters (%s trainable), %.1f MB", type(pl_module.model).__name__,
                 get_human_readable_count(total).strip(), get_human_readable_count(trainable).strip(), megabytes)
