"""The LightningModule that drives any model family: loss, validation, metrics, optimizer.

One training step is one optimizer step over a list of accumulation micro-batches (the
datamodule yields the whole list). The module runs the backward passes itself (Lightning's
manual optimization) so that a loss normalised by a *global* token count sees the count summed
over every micro-batch and every process before the first backward pass; see
:class:`~xdllm.interfaces.GlobalCountLoss`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import ParallelStrategy
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter

from xdllm.collate.prompts import without_target_ids
from xdllm.errors import XdllmError
from xdllm.evaluate import MetricTotals
from xdllm.evaluate.evaluation_loss import EvaluationLoss, takes_context
from xdllm.evaluate.generative_perplexity import GenerativeJudge, finalize_with_judge
from xdllm.interfaces import (
    Evaluator,
    GlobalCountLoss,
    HistoryRecorder,
    LossContext,
    LossDict,
    LossFunction,
    Predictor,
    is_loss_share,
)
from xdllm.predict.inputs import takes_frozen
from xdllm.train.checkpoint_layout import FROZEN_SOURCES_KEY
from xdllm.train.curves import write_curves
from xdllm.train.optim import apply_settings, build_optimizer
from xdllm.train.optim_config import OptimConfig
from xdllm.train.processes import Processes
from xdllm.train.weight_average import CHECKPOINT_KEY as AVERAGE_KEY
from xdllm.train.weight_average import WeightAverage

VALIDATION_ROLES = ("loss", "prediction")

log = logging.getLogger(__name__)


class DiffusionLMModule(L.LightningModule):
    """Generic harness around a family's model, loss, predictor and evaluator.

    Validation dataloaders carry explicit roles (``datamodule.validation_roles``): a ``"loss"``
    loader feeds :meth:`Evaluator.loss_metrics`, a ``"prediction"`` loader runs the predictor
    and feeds :meth:`Evaluator.prediction_metrics`. Every metric is an exact ``Σ sum / Σ count``
    over the whole split and all processes, logged as ``val/<name>``.

    ``frozen``: models held beside the trainable one (eval mode, no gradients, outside the
    state dict and the optimizer); the loss reaches them through :class:`LossContext`, a
    predictor whose ``predict`` takes ``frozen`` through that argument.
    ``history_factory``, when set, returns a recorder for the first prediction batch of every
    validation run. An evaluator with a ``curves`` method also gets its curves drawn in
    TensorBoard at every validation (:mod:`xdllm.train.curves`).
    With ``optim.ema_decay`` the module keeps a moving average of the weights
    (:mod:`xdllm.train.weight_average`): validation runs on it, checkpoints carry it.
    ``judge``, when set, scores every prediction batch's outputs (``val/gen_nll``, ``val/gen_ppl``,
    ``val/gen_entropy``, ``val/gen_ended``; :mod:`xdllm.evaluate.generative_perplexity`); outside
    the state dict.
    ``free_text``: prediction batches lose their ``target_ids`` (a held-out document is no answer).
    ``validation_probe``, when set, gives more figures at the end of every validation from the
    model (``(model, processes) -> {name: value}``, logged as ``val/<name>``: the multiple-choice
    scores of ``validation_choices=``); it may split its work among the processes
    (:class:`~xdllm.train.processes.Processes`), but returns the same figures on every one, so
    they need no reduction.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: LossFunction,
        predictor: Predictor,
        evaluator: Evaluator,
        optim: OptimConfig,
        total_steps: int,
        history_factory: Callable[[int], HistoryRecorder | None] | None = None,
        config: Mapping[str, Any] | None = None,
        frozen: Mapping[str, torch.nn.Module] | None = None,
        frozen_sources: Mapping[str, Any] | None = None,
        checkpoint_extras: Mapping[str, Any] | None = None,
        judge: GenerativeJudge | None = None,
        free_text: bool = False,
        validation_probe: Callable[[torch.nn.Module, Processes], Mapping[str, float]] | None = None,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.model = model
        self.loss_fn = loss_fn
        self.predictor = predictor
        self.evaluator = evaluator
        self.optim = optim
        self.total_steps = total_steps
        self.history_factory = history_factory
        self.config = dict(config or {})
        self.frozen = dict(frozen or {})  # a plain dict: never registered as submodules
        self.frozen_sources = dict(frozen_sources or {})
        self.checkpoint_extras = dict(checkpoint_extras or {})  # entries every checkpoint carries
        for frozen_model in self.frozen.values():
            frozen_model.eval().requires_grad_(False)
        self._loss_takes_context = takes_context(loss_fn)
        self.evaluation_loss = EvaluationLoss(loss_fn, self.frozen)
        self._predictor_extras = {"frozen": self.frozen} if takes_frozen(predictor) else {}
        self.judge = judge  # not a Module: never registered, saved or trained
        self.validation_probe = validation_probe
        self.free_text = free_text
        self._val_totals = MetricTotals()
        self.weight_average: WeightAverage | None = None  # made at fit start, on the weights' device
        self._loaded_average: Mapping[str, Any] | None = None

    # ------------------------------------------------------------------ loss

    def call_loss(self, model: torch.nn.Module, batch: Mapping[str, Any],
                  counts: Mapping[str, Tensor] | None = None) -> LossDict:
        """The family loss on one batch, with the context when the loss takes one."""
        if self._loss_takes_context:
            return self.loss_fn(model, batch, context=LossContext(counts=counts, frozen=self.frozen))
        return self.loss_fn(model, batch)

    def _sum_over_processes(self, value: Tensor) -> Tensor:
        return self.trainer.strategy.reduce(value, reduce_op="sum")

    def global_counts(self, micro_batches: Sequence[Mapping[str, Any]]) -> dict[str, Tensor] | None:
        """The loss's token counts summed over the step's micro-batches and all processes
        (None for a loss that normalises locally: no ``token_counts``, or no ``context`` to
        receive them in, as in a subclass whose ``__call__`` drops it)."""
        if not isinstance(self.loss_fn, GlobalCountLoss) or not self._loss_takes_context:
            return None
        totals: dict[str, Tensor] = {}
        for batch in micro_batches:
            for name, count in self.loss_fn.token_counts(batch).items():
                totals[name] = totals.get(name, 0) + count.detach().to(self.device, torch.float32)
        names = sorted(totals)
        if not names:
            return {}
        summed = self._sum_over_processes(torch.stack([totals[name] for name in names]))
        return dict(zip(names, summed.unbind()))

    # ------------------------------------------------------------------ training

    def on_fit_start(self) -> None:
        sharded = "fsdp" in type(self.trainer.strategy).__name__.lower()
        if self.optim.gradient_clip_val and sharded:
            raise XdllmError("optim.gradient_clip_val needs the whole gradient, which FSDP shards across "
                             "processes: train with optim.gradient_clip_val=null under trainer.strategy=fsdp")
        if self.optim.ema_decay is not None and sharded:
            raise XdllmError("optim.ema_decay averages whole weights, which FSDP shards across processes: train "
                             "with optim.ema_decay=null under trainer.strategy=fsdp, or with trainer.strategy=ddp")
        for frozen_model in self.frozen.values():
            frozen_model.to(self.device)
        if self.optim.ema_decay is not None:
            self.weight_average = WeightAverage(self.model, self.optim.ema_decay)
            if self._loaded_average is not None:
                self._load_average(self._loaded_average)

    def on_train_start(self) -> None:
        """After Lightning restored a resumed run's optimizer and schedule: this run's ``optim.*``."""
        changed = apply_settings(self.optimizers().optimizer, self.lr_schedulers(), self.optim)
        if changed and self.trainer.is_global_zero:
            log.info("resume: %s (the optimizer's moments are the checkpoint's)", ", ".join(changed))

    def training_step(self, micro_batches: Sequence[Mapping[str, Any]], batch_idx: int) -> None:
        """One optimizer step: backward over every micro-batch, clip, step, schedule.

        Clipping scales the gradients by ``gradient_clip_val / norm`` with the norm measured for
        the log (torch's ``clip_grad_norm_`` rule), outside Lightning's precision plugin, which
        refuses to clip for a fused optimizer under mixed precision.

        Gradient scale: a globally normalised loss already divides by the count over all
        processes and micro-batches, so it is multiplied by the world size (DDP averages
        gradients over processes); a locally normalised loss is divided by the number of
        micro-batches (the usual accumulation average).
        """
        optimizer, scheduler = self.optimizers(), self.lr_schedulers()
        counts = self.global_counts(micro_batches)
        world_size = self.trainer.world_size
        scale = float(world_size) if counts is not None else 1.0 / len(micro_batches)
        logged: dict[str, Tensor] = {}
        for index, batch in enumerate(micro_batches):
            with self._gradient_sync(last=index == len(micro_batches) - 1):
                out = self.call_loss(self.model, batch, counts)
                self.manual_backward(out["loss"] * scale)
            for name, value in out.items():
                logged[name] = logged.get(name, 0) + value.detach()
        grad_norm = self._gradient_norm()
        if self.optim.gradient_clip_val:  # scaled by the norm just measured: no second pass
            torch.nn.utils.clip_grads_with_norm_(self.model.parameters(), self.optim.gradient_clip_val, grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        if self.weight_average is not None:
            self.weight_average.update()
        self._log_training(logged, micro_batches, counts is not None)
        self.log("train/grad_norm", grad_norm, batch_size=micro_batches[0]["input_ids"].shape[0])

    def _gradient_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """Where processes share gradients (DDP), only the step's last backward all-reduces them;
        the earlier micro-batches accumulate locally (Lightning's ``block_backward_sync``)."""
        strategy = self.trainer.strategy
        if last or not isinstance(strategy, ParallelStrategy):
            return contextlib.nullcontext()
        return strategy.block_backward_sync()

    def _gradient_norm(self) -> Tensor:
        """The global L2 norm of the accumulated gradients, before clipping."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if not grads:
            return torch.zeros((), device=self.device)
        return torch.nn.utils.get_total_norm(grads).detach()

    def _log_training(self, logged: Mapping[str, Tensor], micro_batches: Sequence[Mapping[str, Any]],
                      global_loss: bool) -> None:
        """``train/loss`` is the step's loss: for a globally normalised loss the sum of every
        process's share (the loss of the whole global batch), else the micro-batch mean. A
        globally normalised loss's terms (``*_loss`` entries) are summed the same way, so they
        add up to ``train/loss``; other entries are micro-batch means."""
        batch_size = micro_batches[0]["input_ids"].shape[0]
        shares = sorted(name for name in logged if global_loss and is_loss_share(name))
        values = {name: value / len(micro_batches) for name, value in logged.items() if name not in shares}
        if shares:
            summed = self._sum_over_processes(torch.stack([logged[name] for name in shares]))
            values.update(zip(shares, summed.unbind()))
        for name, value in values.items():  # no prog_bar: see xdllm.train.progress_bar
            self.log(f"train/{name}", value, batch_size=batch_size)
        per_step = sum(batch["input_ids"].shape[0] for batch in micro_batches) * self.trainer.world_size
        self.log("train/samples_seen", float(self.global_step * per_step), batch_size=batch_size)

    # ------------------------------------------------------------------ validation

    def _validation_role(self, dataloader_idx: int) -> str:
        roles = getattr(self.trainer.datamodule, "validation_roles", None)
        if roles is None:
            raise RuntimeError("the datamodule must define validation_roles, e.g. ('loss', 'prediction')")
        role = roles[dataloader_idx]
        if role not in VALIDATION_ROLES:
            raise ValueError(f"unknown validation role {role!r}; known: {VALIDATION_ROLES}")
        return role

    def on_validation_epoch_start(self) -> None:
        self._val_totals = MetricTotals()
        if self.judge is not None:
            self.judge.model.to(self.device)
        if self.weight_average is not None:
            self.weight_average.apply()

    def validation_step(self, batch: Mapping[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._validation_role(dataloader_idx) == "loss":
            self._val_totals.add(self.evaluator.loss_metrics(self.model, batch, self.evaluation_loss))
            return
        history = None
        if self.history_factory is not None and batch_idx == 0:
            history = self.history_factory(self.global_step)
        if self.free_text:
            batch = without_target_ids(batch)
        prediction = self.predictor.predict(batch, model=self.model, history=history, **self._predictor_extras)
        self._val_totals.add(self.evaluator.prediction_metrics(batch, prediction))
        if self.judge is not None:
            self._val_totals.add(self.judge.score(batch, prediction).sums(self.device))

    def on_validation_epoch_end(self) -> None:
        means = self._val_totals.means(reduce=self._sum_over_processes)
        values = finalize_with_judge(self.evaluator, means)
        if self.validation_probe is not None:
            values.update(self.validation_probe(self.model, Processes(self.global_rank, self.trainer.world_size,
                                                                      self.all_gather)))
        for name, value in values.items():
            self.log(f"val/{name}", value, prog_bar=True)
        self._write_curves(values)
        if self.weight_average is not None:  # before any checkpoint of this validation is written
            self.weight_average.restore()

    def _write_curves(self, values: Mapping[str, float]) -> None:
        """An evaluator with a ``curves(values)`` method (name -> ``(x, y)`` points, e.g. an
        accuracy per block position) gets each drawn as a TensorBoard figure per validation."""
        curves = getattr(self.evaluator, "curves", None)
        writer = getattr(self.logger, "experiment", None)
        if curves is None or not isinstance(writer, SummaryWriter) or not self.trainer.is_global_zero:
            return
        write_curves(writer, curves(values), self.global_step)

    # ------------------------------------------------------------------ optimizer, checkpoints

    def configure_optimizers(self):
        optimizer, scheduler = build_optimizer(self.model, self.optim, self.total_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["xdllm_config"] = self.config
        checkpoint[FROZEN_SOURCES_KEY] = self.frozen_sources
        checkpoint.update(self.checkpoint_extras)
        if self.weight_average is not None:
            if self.weight_average.applied:
                raise RuntimeError("a checkpoint was saved while validation held the averaged weights in the model")
            checkpoint[AVERAGE_KEY] = self.weight_average.state()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Resume the weight average where the checkpoint has one (a checkpoint without one, or a
        run without ``optim.ema_decay``, starts or drops it)."""
        self._loaded_average = checkpoint.get(AVERAGE_KEY)
        if self.weight_average is not None and self._loaded_average is not None:
            self._load_average(self._loaded_average)
        step = checkpoint.get("global_step")
        if not self.trainer.is_global_zero:  # every process restores; the first one says so
            return
        if self._loaded_average is None and self.optim.ema_decay is not None:
            log.info("the checkpoint of step %s has no weight average: optim.ema_decay=%g starts one from its "
                     "weights", step, self.optim.ema_decay)
        elif self._loaded_average is not None and self.optim.ema_decay is None:
            log.info("the checkpoint of step %s has a weight average, which this run drops (optim.ema_decay is "
                     "null); its validation uses the trained weights", step)

    def _load_average(self, state: Mapping[str, Any]) -> None:
        try:
            self.weight_average.load_state(state)
        except ValueError as error:
            raise XdllmError(f"resume: {error}") from error
