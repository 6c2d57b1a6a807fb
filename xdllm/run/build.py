"""Turn a composed config into the objects of a run: tokenizer, task, data, model, loss, predictor.

Family configs name their components by ``_target_``. Before instantiation xdllm fills the
``derived`` node (vocabulary size, special token ids, ``max_new_tokens`` of the task) so family
configs can interpolate ``${derived.*}``; collators, the predictor and the evaluator also
receive the tokenizer object as ``tokenizer=``. A family without an ``evaluator`` node gets
:class:`~xdllm.evaluate.AnswerEvaluator` (loss, exact match, token accuracy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import MissingMandatoryValue

from xdllm.config.components import check_components
from xdllm.data import example, get_task, load_tokenizer
from xdllm.data.datamodule import DiffusionData
from xdllm.data.prepared_task import PreparedTask
from xdllm.data.tasks import TaskParameterError
from xdllm.errors import XdllmError
from xdllm.evaluate import AnswerEvaluator
from xdllm.evaluate.task_scores import ScoredTask, TaskScoredEvaluator
from xdllm.interfaces import Evaluator, Tokenizer

COMPONENT_KEYS = ("model", "collator", "loss", "predictor")
ENCODING_PROBE = 16
"""Validation samples encoded while building, so a tokenizer that cannot encode the task fails
before anything is written."""


@dataclass
class RunComponents:
    config: DictConfig
    tokenizer: Tokenizer
    task: Any
    model: torch.nn.Module
    loss: Any
    predictor: Any
    evaluator: Evaluator
    collators: dict[str, Any]


def _require_keys(config: DictConfig) -> None:
    missing = [key for key in COMPONENT_KEYS if key not in config]
    if missing:
        family = config.get("model_family", "<unknown>")
        raise XdllmError(f"model family '{family}' config lacks {', '.join(missing)}")


def fill_derived(config: DictConfig, tokenizer: Tokenizer, task: Any) -> None:
    """Write the ``derived`` node the family configs interpolate."""
    with open_dict(config):
        config.derived = {
            "vocab_size": tokenizer.vocab_size,
            "pad_token_id": tokenizer.pad_token_id,
            "mask_token_id": tokenizer.mask_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "max_new_tokens": task.max_target_len + 1,
            "max_prompt_len": task.max_prompt_len,
        }


def instantiate_component(node: DictConfig, where: str, **kwargs: Any) -> Any:
    """Build one component; a failure names the node and the constructor's own message."""
    try:
        return instantiate(node, **kwargs)
    except Exception as error:
        cause = error.__cause__ if isinstance(error, InstantiationException) and error.__cause__ else error
        raise XdllmError(f"could not build {where} ({node.get('_target_')}): {cause}") from error


def _position_limit(model: torch.nn.Module) -> int | None:
    """The longest sequence a model can embed (its ``config.max_positions``), if it says."""
    limit = getattr(getattr(model, "config", None), "max_positions", None)
    return limit if isinstance(limit, int) else None


def _positions_needed(predictor: Any, prompt_length: int, max_new_tokens: int) -> int:
    """The positions a generation from a prompt of ``prompt_length`` tokens (bos included) uses:
    the predictor's own count where it has one (block-aligned predictors start the answer on a
    block boundary and round it to whole blocks), else the prompt plus ``max_new_tokens``."""
    own = getattr(predictor, "positions_needed", None)
    return int(own(prompt_length)) if callable(own) else prompt_length + max_new_tokens


@dataclass(frozen=True)
class PositionOverflow:
    """A canvas longer than the model's positions: ``needed`` against the model's ``limit``;
    ``placed`` says the predictor's whole blocks made it longer than prompt + new tokens."""

    limit: int
    needed: int
    placed: str


def position_overflow(model: torch.nn.Module, predictor: Any, prompt_length: int,
                      max_new_tokens: int) -> PositionOverflow | None:
    """How a generation from a prompt of ``prompt_length`` tokens (bos included) overflows the
    model's positions, or None when it fits (or the model does not say its limit)."""
    limit = _position_limit(model)
    needed = _positions_needed(predictor, prompt_length, max_new_tokens)
    if limit is None or needed <= limit:
        return None
    placed = "" if needed == prompt_length + max_new_tokens else "placed on whole blocks by the predictor"
    return PositionOverflow(limit, needed, placed)


def check_positions(model: torch.nn.Module, task: Any, max_new_tokens: int, predictor: Any) -> None:
    """The task's longest sequence (bos, the longest prompt, the generation window, as the
    predictor places it) must fit the model's positions, or training and generation would fail
    deep inside the model (or, for generation, only after training)."""
    overflow = position_overflow(model, predictor, 1 + task.max_prompt_len, max_new_tokens)
    if overflow is not None:
        placed = f", {overflow.placed}" if overflow.placed else ""
        raise XdllmError(f"model.max_positions={overflow.limit} is too small for task {task.name}: its longest "
                         f"sequence is {overflow.needed} positions (bos + prompt of {task.max_prompt_len} + "
                         f"{max_new_tokens} answer slots{placed}); raise model.max_positions")


def check_vocabulary(model: torch.nn.Module, tokenizer: Tokenizer) -> None:
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(size, int) and size < tokenizer.vocab_size:
        raise XdllmError(f"model.vocab_size={size} is smaller than the tokenizer's vocabulary "
                         f"({tokenizer.vocab_size} tokens); leave it at ${{derived.vocab_size}}")


def _built_task(config: DictConfig, tokenizer: Tokenizer) -> Any:
    params = OmegaConf.to_container(config.task.get("params", {}), resolve=True, throw_on_missing=True)
    task = get_task(config.task.name, tokenizer=tokenizer, **params)
    if not isinstance(task, PreparedTask):  # prepared data: its tokenizer's fingerprint is checked
        for index in range(ENCODING_PROBE):  # the tokenizer must encode the task: fail here, not mid-run
            example(task, tokenizer, "validation", index, config.seed)
    return task


def build_components(config: DictConfig, tokenizer: Tokenizer | None = None, task: Any = None) -> RunComponents:
    """The run's objects; ``tokenizer``: the one to use instead of loading ``config.tokenizer``
    (the one a checkpoint stores); ``task``: the one to use instead of building ``config.task``
    (a loaded run's :class:`~xdllm.data.absent_data.AbsentDataTask`)."""
    _require_keys(config)
    try:
        tokenizer = tokenizer if tokenizer is not None else load_tokenizer(config.tokenizer)
    except (ValueError, FileNotFoundError) as error:
        raise XdllmError(str(error)) from error
    try:
        if task is None:
            task = _built_task(config, tokenizer)
    except MissingMandatoryValue as error:
        raise XdllmError(f"task {config.task.name} needs a value for {error.full_key}") from error
    except TaskParameterError as error:
        removals = " ".join(f"'~task.params.{key}'" for key in error.unknown)
        raise XdllmError(f"{error}; the experiment or config that sets it was written for another task: "
                         f"drop it with {removals}") from error
    except (ValueError, FileNotFoundError, KeyError, TypeError) as error:
        raise XdllmError(f"task {config.task.name}: {error}") from error
    fill_derived(config, tokenizer, task)
    check_components(config)
    collators = {
        role: instantiate_component(node, f"collator.{role}", tokenizer=tokenizer)
        for role, node in config.collator.items()
    }
    for role in ("train", "val", "prediction"):
        if role not in collators:
            raise XdllmError(f"config collator.{role} is missing")
    model = instantiate_component(config.model, "model")
    check_vocabulary(model, tokenizer)
    return RunComponents(
        config=config,
        tokenizer=tokenizer,
        task=task,
        model=model,
        loss=instantiate_component(config.loss, "loss"),
        predictor=instantiate_component(config.predictor, "predictor", tokenizer=tokenizer),
        evaluator=build_evaluator(config, tokenizer, task),
        collators=collators,
    )


def build_evaluator(config: DictConfig, tokenizer: Tokenizer, task: object) -> Evaluator:
    """The family's evaluator (AnswerEvaluator by default), with the task's own answer scores
    added when the task has them."""
    node = config.get("evaluator")
    if node is None:
        evaluator = AnswerEvaluator(tokenizer)
    else:
        evaluator = instantiate_component(node, "evaluator", tokenizer=tokenizer)
        if not isinstance(evaluator, Evaluator):
            raise XdllmError(f"evaluator {node.get('_target_')} lacks the Evaluator methods "
                             "(loss_metrics, prediction_metrics, finalize, records)")
    if isinstance(task, ScoredTask):
        return TaskScoredEvaluator(evaluator, task, tokenizer)
    return evaluator


D = TypeVar("D", bound=DiffusionData)


def build_datamodule(components: RunComponents, kind: type[D] = DiffusionData) -> D:
    """The run's data as ``kind``: :class:`DiffusionData` to read held-out splits, training's
    Lightning :class:`~xdllm.data.lightning_datamodule.DiffusionDataModule`."""
    try:
        return _datamodule(components, kind)
    except ValueError as error:
        raise XdllmError(str(error)) from error


def _datamodule(components: RunComponents, kind: type[D]) -> D:
    config = components.config
    return kind(
        accumulate_grad_batches=config.optim.get("accumulate_grad_batches", 1),
        validation_roles=tuple(config.data.get("validation_roles", ("loss", "prediction"))),
        task=components.task,
        tokenizer=components.tokenizer,
        train_collator=components.collators["train"],
        val_collator=components.collators["val"],
        prediction_collator=components.collators["prediction"],
        batch_size=config.data.batch_size,
        eval_batch_size=config.data.eval_batch_size,
        num_val_samples=config.data.num_val_samples,
        num_predict_samples=config.data.num_test_samples,
        seed=config.seed,
        num_workers=config.data.num_workers,
    )
