"""``early_stopping``: end training before ``trainer.max_steps`` once validation says it is done.

Judged on ``checkpoint.monitor`` in its ``checkpoint.mode`` (the metric ``best.ckpt`` is chosen
by), after each validation:

- ``early_stopping.patience=N``: it has not improved on its best for ``N`` validations in a row
  (an improvement is a change of more than ``early_stopping.min_delta`` the right way);
- ``early_stopping.stop_at=V``: it reached ``V`` (``>= V`` for ``max``, ``<= V`` for ``min``);

never before ``early_stopping.min_steps`` (the validations before it count towards the patience).

A stop ends the run as ``trainer.max_steps`` would: ``last.ckpt`` saved, the validation's
``best.ckpt`` kept, the generation after training run, exit status 0; the run's log says why
(``early stopping after the validation at step 1500: ...``) and ``xdllm runs`` shows the step.
The count of validations without improvement is kept in the checkpoints, so that a resumed run
counts on (``resume=`` a run that stopped early says so, trains on to its next validation, and
stops there unless it improved or the options changed: ``early_stopping.patience=null`` trains on).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

from xdllm.errors import XdllmError
from xdllm.log_marks import EARLY_STOP_LINE

log = logging.getLogger(__name__)


class EarlyStopping(L.Callback):
    """Sets ``trainer.should_stop`` after the validation that meets the stopping condition; its
    sentence in :attr:`reason` (empty: it did not stop the run)."""

    def __init__(self, monitor: str, mode: str, patience: int | None, min_delta: float,
                 stop_at: float | None, min_steps: int = 0) -> None:
        self.monitor, self.mode, self.sign = monitor, mode, 1.0 if mode == "max" else -1.0
        self.patience, self.min_delta, self.stop_at, self.min_steps = patience, min_delta, stop_at, min_steps
        self.best: float | None = None
        self.best_step = 0
        self.waited = 0
        self.reason = ""
        self.earlier_reason = ""  # why it stopped the run this one resumes (empty: it did not)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.earlier_reason and trainer.is_global_zero:
            log.info("this run had stopped: %s; it trains on to its next validation, where early_stopping judges "
                     "again (early_stopping.patience=null early_stopping.stop_at=null train on to "
                     "trainer.max_steps)", self.earlier_reason)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING or value is None:
            return  # a run that never logs the metric is refused by best.ckpt's callback
        value, step = float(value), trainer.global_step
        if self.best is None or self.sign * (value - self.best) > self.min_delta:
            self.best, self.best_step, self.waited = value, step, 0
        else:
            self.waited += 1
        why = self._why(value) if self.min_steps <= step < trainer.max_steps else ""  # at max_steps: no early stop
        stop = trainer.strategy.reduce_boolean_decision(bool(why), all=False) if trainer.world_size > 1 else bool(why)
        if stop:
            trainer.should_stop = True
            self.reason = EARLY_STOP_LINE.format(step=step, why=why or "another process's validation said so")
            if trainer.is_global_zero:
                log.info(self.reason)

    def _why(self, value: float) -> str:
        if self.stop_at is not None and math.isfinite(value) and self.sign * (value - self.stop_at) >= 0:
            return f"{self.monitor}={value:.4g} reached early_stopping.stop_at={self.stop_at:g}"
        if self.patience is not None and self.waited >= self.patience:
            return (f"{self.monitor} has not improved on {self.best:.4g} (step {self.best_step}) for {self.waited} "
                    f"validation{'s' * (self.waited != 1)} (early_stopping.patience={self.patience}, "
                    f"min_delta={self.min_delta:g})")
        return ""

    @property
    def state_key(self) -> str:
        """Its count in a checkpoint is that of its metric and mode: a resume that monitors another
        starts counting afresh."""
        return self._generate_state_key(monitor=self.monitor, mode=self.mode)

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_step": self.best_step, "waited": self.waited, "reason": self.reason}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best, self.best_step, self.waited = state_dict["best"], state_dict["best_step"], state_dict["waited"]
        self.earlier_reason = state_dict.get("reason", "")


def early_stopping(options: Any, monitor: str, mode: str) -> EarlyStopping | None:
    """The callback for the run's ``early_stopping`` options (None: neither ``patience`` nor
    ``stop_at`` is set, the run trains to ``trainer.max_steps``)."""
    if options.patience is None and options.stop_at is None:
        return None
    if options.stop_at is not None and not math.isfinite(options.stop_at):
        raise XdllmError(f"early_stopping.stop_at={options.stop_at} is not allowed: give a finite value of {monitor} "
                         "to stop at (or null)")
    return EarlyStopping(monitor, mode, options.patience, float(options.min_delta),
                         None if options.stop_at is None else float(options.stop_at), options.min_steps)
