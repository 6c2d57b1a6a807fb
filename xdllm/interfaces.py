"""The contract between the xdllm core and a model-family package, in one place.

A model family (``models/mlm`` and ``models/mdlm`` are examples) provides its roles, each a small
object built by Hydra from the family's config (``_target_`` dotted paths):

- a **model**: ``nn.Module`` mapping a (partly masked) canvas to logits;
- a **collator** (:class:`Collator`): turns a list of :class:`Example` into a training or
  prediction batch;
- a **loss** (:class:`LossFunction`): turns ``(model, batch)`` into a :class:`LossDict`; a loss
  may also take a :class:`LossContext` (global token counts, frozen models,
  :class:`GlobalCountLoss`);
- a **predictor**: runs iterative unmasking on a prediction batch and returns a
  :class:`PredictionDict`, calling an optional :class:`HistoryRecorder` at every step;
- optionally an **evaluator** (:class:`Evaluator`): validation metrics and prediction records;
- **types**: the family's TypedDicts for its batches (see ``xdllm_models.mlm.types``).

The family registers a :class:`ModelFamily` under the ``xdllm.models`` entry-point group (or is
found on the model search path, see :mod:`xdllm.registry`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, runtime_checkable

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.model_family import ModelFamily  # noqa: F401 (re-exported: the contract's one place)
from xdllm.tokenizer_protocol import Tokenizer  # noqa: F401 (re-exported, as ModelFamily)


class Example(TypedDict):
    """One tokenized task sample, before collation.

    ``prompt_ids`` are given to the model and never corrupted (empty for unconditional data);
    ``target_ids`` are what the model must produce. Neither includes bos/eos: collators add them.
    ``sample_index`` is the sample's global position in its stream (unique within a run for the
    training split), ``step`` the optimizer step it belongs to; together with the run seed they
    make corruption a deterministic function of the data, not of the device layout.
    """

    prompt_ids: list[int]
    target_ids: list[int]
    sample_index: int
    step: int


class LossDict(TypedDict):
    """Output of a loss. ``loss`` is back-propagated; every other scalar entry is logged."""

    loss: Float[Tensor, ""]


class PredictionDict(TypedDict):
    """Output of a predictor: decoded text, ids, where each output starts, cost per sample."""

    loss: Float[Tensor, " batch"] | None
    text: list[str]
    ids: Integer[Tensor, "batch seq_len"]
    time_taken: list[float]
    output_start_idx: Integer[Tensor, " batch"]
    steps_taken: list[int]


@runtime_checkable
class Collator(Protocol):
    def __call__(self, examples: Sequence[Example]) -> Mapping[str, Tensor]: ...


@runtime_checkable
class LossFunction(Protocol):
    def __call__(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> LossDict: ...


@dataclass(frozen=True)
class DenoisingStep:
    """What the predictor hands a history recorder after each step: only what a recorder keeps.

    Per-position values live on the predictor's *output window*: offset ``o`` of row ``b`` is
    canvas column ``output_start[b] + o``, a real position of the row's output region where
    ``window_valid[b, o]`` (rows' regions may differ in length; the window is as wide as the
    longest). ``topk_ids`` / ``topk_probs`` are the ``k`` most probable tokens, best first, of
    the final distribution the step sampled from (after temperature / top-k / top-p), with
    ``k`` the recorder's own :attr:`HistoryRecorder.k`: no tensor has a vocabulary dimension.
    ``committed`` marks the offsets unmasked in this step and ``confidence`` holds the
    predictor's scores. ``active`` marks rows that used a forward pass in this step; rows that
    did not, and offsets outside a row's region, hold zeros (False). ``canvas`` is the whole
    canvas after the step. The tensors belong to the predictor: a recorder copies what it keeps.
    """

    step: int
    canvas: Integer[Tensor, "batch seq_len"]
    output_start: Integer[Tensor, " batch"]
    window_valid: Bool[Tensor, "batch region"]
    topk_ids: Integer[Tensor, "batch region k"]
    topk_probs: Float[Tensor, "batch region k"]
    committed: Bool[Tensor, "batch region"]
    confidence: Float[Tensor, "batch region"]
    active: Bool[Tensor, " batch"]


@runtime_checkable
class HistoryRecorder(Protocol):
    """Called by the predictor: ``begin`` once per batch, ``on_step`` after every step.

    ``k`` is how many top tokens per position and step the recorder keeps; the predictor reads
    it once per batch and hands over exactly that many (so it never passes whole distributions).
    """

    k: int

    def begin(self, batch: Mapping[str, Any], canvas: Integer[Tensor, "batch seq_len"],
              output_start: Integer[Tensor, " batch"]) -> None: ...

    def on_step(self, state: DenoisingStep) -> None: ...

    def end(self, prediction: PredictionDict) -> None: ...


@runtime_checkable
class Predictor(Protocol):
    def predict(
        self,
        batch: Mapping[str, Any],
        model: torch.nn.Module | None = None,
        history: HistoryRecorder | None = None,
    ) -> PredictionDict: ...


MetricSums = Mapping[str, tuple[Tensor, Tensor]]
"""Metric name -> ``(sum, count)`` scalar tensors. Sums add across batches, accumulation
micro-batches and processes; the metric is ``Σ sum / Σ count`` once everything is added, so
averages are exact whatever the batch and device split."""


@dataclass(frozen=True)
class LossContext:
    """What the harness hands a loss beyond ``(model, batch)``.

    ``counts``: the loss's :meth:`GlobalCountLoss.token_counts`, summed over every process and
    every accumulation micro-batch of the optimizer step (None outside training: the loss then
    uses its local counts). ``frozen``: models held beside the trainable one (eval mode, no
    gradients), by the names given in the run's ``frozen`` config.
    """

    counts: Mapping[str, Tensor] | None = None
    frozen: Mapping[str, torch.nn.Module] | None = None


@runtime_checkable
class GlobalCountLoss(Protocol):
    """A loss normalised by global token counts.

    The harness calls :meth:`token_counts` on every micro-batch of an optimizer step, sums the
    counts over micro-batches and processes, and calls the loss with
    ``context=LossContext(counts=...)``. The harness scales the backward pass so that the
    gradient is ``Σ_all-tokens grad / global count`` whatever the number of processes and
    micro-batches.

    ``loss`` and every entry named ``*_loss`` (its terms, e.g. ``diffusion_loss``) are shares of
    the global loss, normalised by the global counts: the harness logs their sums over
    micro-batches and processes (:func:`is_loss_share`). Other entries are logged as
    micro-batch means.
    """

    def token_counts(self, batch: Mapping[str, Any]) -> Mapping[str, Tensor]: ...

    def __call__(self, model: torch.nn.Module, batch: Mapping[str, Any],
                 context: LossContext | None = None) -> LossDict: ...


def is_loss_share(name: str) -> bool:
    """Whether a :class:`GlobalCountLoss` output entry is a share of the global loss (``loss``
    or a ``*_loss`` term), summed over micro-batches and processes rather than averaged."""
    return name == "loss" or name.endswith("_loss")


@runtime_checkable
class Evaluator(Protocol):
    """A family's validation metrics and prediction records (config key ``evaluator``).

    ``loss_metrics`` runs on the ``"loss"`` validation loader (and ``xdllm eval``),
    ``prediction_metrics`` on the predictor's output for the ``"prediction"`` loader (and
    ``xdllm generate``). The harness logs ``val/<name>`` for every name, computed as
    ``Σ sum / Σ count`` over the whole split, then passed through ``finalize`` (which may add
    derived values, e.g. a perplexity from a mean NLL). ``records`` gives one JSON-ready dict
    per sample for ``predictions.jsonl``.
    """

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums: ...

    def prediction_metrics(self, batch: Mapping[str, Any],
                           prediction: PredictionDict) -> MetricSums: ...

    def finalize(self, means: Mapping[str, float]) -> dict[str, float]: ...

    def records(self, batch: Mapping[str, Any], prediction: PredictionDict) -> list[dict[str, Any]]: ...
