"""Turn a composed config into the objects of a run: tokenizer, task, data, model, loss, predictor.

Family configs name their components by ``_target_``. Before instantiation xdllm fills the
``derived`` node (vocabulary size, special token ids, ``max_new_tokens`` of the task) so family
configs can interpolate ``${derived.*}``; collators, the predictor and the evaluator also
receive the tokenizer object as ``tokenizer=``. A family without an ``evaluator`` node gets
:class:`~xdllm.evaluate.AnswerEvaluator` (loss, exact match, token accuracy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import MissingMandatoryValue

from xdllm.data import DiffusionDataModule, get_task, load_tokenizer
from xdllm.errors import XdllmError
from xdllm.evaluate import AnswerEvaluator
from xdllm.interfaces import Evaluator, Tokenizer

COMPONENT_KEYS = ("model", "collator", "loss", "predictor")


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
        }


def _instantiate(node: DictConfig, where: str, **kwargs: Any) -> Any:
    try:
        return instantiate(node, **kwargs)
    except Exception as error:
        raise XdllmError(f"could not build {where}: {error}") from error


def build_components(config: DictConfig) -> RunComponents:
    _require_keys(config)
    try:
        tokenizer = load_tokenizer(config.tokenizer)
        params = OmegaConf.to_container(config.task.get("params", {}), throw_on_missing=True)
        task = get_task(config.task.name, tokenizer=tokenizer, **params)
    except MissingMandatoryValue as error:
        raise XdllmError(f"task {config.task.name} needs a value for {error.full_key}") from error
    except (ValueError, FileNotFoundError, KeyError, TypeError) as error:
        raise XdllmError(f"task {config.task.name}: {error}") from error
    fill_derived(config, tokenizer, task)
    collators = {
        role: _instantiate(node, f"collator.{role}", tokenizer=tokenizer)
        for role, node in config.collator.items()
    }
    for role in ("train", "val", "prediction"):
        if role not in collators:
            raise XdllmError(f"config collator.{role} is missing")
    return RunComponents(
        config=config,
        tokenizer=tokenizer,
        task=task,
        model=_instantiate(config.model, "model"),
        loss=_instantiate(config.loss, "loss"),
        predictor=_instantiate(config.predictor, "predictor", tokenizer=tokenizer),
        evaluator=_build_evaluator(config, tokenizer),
        collators=collators,
    )


def _build_evaluator(config: DictConfig, tokenizer: Tokenizer) -> Evaluator:
    node = config.get("evaluator")
    if node is None:
        return AnswerEvaluator(tokenizer)
    evaluator = _instantiate(node, "evaluator", tokenizer=tokenizer)
    if not isinstance(evaluator, Evaluator):
        raise XdllmError(f"evaluator {node.get('_target_')} lacks the Evaluator methods "
                         "(loss_metrics, prediction_metrics, finalize, records)")
    return evaluator


def build_datamodule(components: RunComponents) -> DiffusionDataModule:
    config = components.config
    return DiffusionDataModule(
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
