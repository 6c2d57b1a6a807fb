"""The LightningModule that drives any model family: loss, validation, metrics, optimizer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import lightning as L
import torch

from xdllm.interfaces import HistoryRecorder, LossFunction, Predictor
from xdllm.predict.metrics import match_output_regions
from xdllm.train.optim import OptimConfig, build_optimizer

VALIDATION_ROLES = ("loss", "prediction")


class DiffusionLMModule(L.LightningModule):
    """Generic harness around a family's model, loss and predictor.

    Validation dataloaders carry explicit roles (``datamodule.validation_roles``): a ``"loss"``
    loader gives ``val/loss``; a ``"prediction"`` loader runs the predictor and gives
    ``val/exact_match`` and ``val/token_accuracy``. ``history_factory``, when set, returns a
    recorder for the first prediction batch of every validation run.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: LossFunction,
        predictor: Predictor,
        optim: OptimConfig,
        total_steps: int,
        pad_token_id: int,
        eos_token_id: int,
        history_factory: Callable[[int], HistoryRecorder | None] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.predictor = predictor
        self.optim = optim
        self.total_steps = total_steps
        self.pad_token_id = pad_token_id
        self.eos_token_id = eos_token_id
        self.history_factory = history_factory
        self.config = dict(config or {})

    def _validation_role(self, dataloader_idx: int) -> str:
        roles = getattr(self.trainer.datamodule, "validation_roles", None)
        if roles is None:
            raise RuntimeError("the datamodule must define validation_roles, e.g. ('loss', 'prediction')")
        role = roles[dataloader_idx]
        if role not in VALIDATION_ROLES:
            raise ValueError(f"unknown validation role {role!r}; known: {VALIDATION_ROLES}")
        return role

    def training_step(self, batch: Mapping[str, Any], batch_idx: int) -> torch.Tensor:
        out = self.loss_fn(self.model, batch)
        batch_size = batch["input_ids"].shape[0]
        for name, value in out.items():
            self.log(f"train/{name}", value, prog_bar=name == "loss", batch_size=batch_size)
        per_step = batch_size * self.trainer.world_size * self.trainer.accumulate_grad_batches
        self.log("train/samples_seen", float((self.global_step + 1) * per_step), batch_size=batch_size)
        return out["loss"]

    def validation_step(self, batch: Mapping[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        role = self._validation_role(dataloader_idx)
        batch_size = batch["input_ids"].shape[0]
        if role == "loss":
            out = self.loss_fn(self.model, batch)
            self.log("val/loss", out["loss"], prog_bar=True, batch_size=batch_size,
                     add_dataloader_idx=False, sync_dist=True)
            return
        history = None
        if self.history_factory is not None and batch_idx == 0:
            history = self.history_factory(self.global_step)
        prediction = self.predictor.predict(batch, model=self.model, history=history)
        match = match_output_regions(prediction["ids"], prediction["output_start_idx"],
                                     batch["target_ids"], self.eos_token_id, self.pad_token_id)
        tokens = int(match.length.sum())
        self.log("val/exact_match", match.exact.float().mean(), prog_bar=True, batch_size=batch_size,
                 add_dataloader_idx=False, sync_dist=True)
        self.log("val/token_accuracy", match.correct.sum() / max(tokens, 1), batch_size=max(tokens, 1),
                 add_dataloader_idx=False, sync_dist=True)

    def configure_optimizers(self):
        optimizer, scheduler = build_optimizer(self.model, self.optim, self.total_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["xdllm_config"] = self.config
