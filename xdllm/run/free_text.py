"""Free text: a task without prompts (``text_file``), whose samples have no answer to score.

Generating from nothing gives one text among countless right ones, so exact match against the
held-out document means nothing there. A run on free text is judged by the family's loss metrics
instead (MDLM: ``nll_bound``/``ppl_bound``, ARLM: ``nll``/``ppl``, every family: ``loss``):

- ``data.validation_roles: null`` (the default) validates with the loss loader only on free
  text (with both when a ``judge`` scores what validation generates), with the loss and
  prediction loaders otherwise;
- ``checkpoint.monitor: null`` keeps the best ``val/exact_match`` where validation generates
  answers, else the lowest ``val/loss``; ``checkpoint.mode: null`` is max for exact match and token
  accuracy, min for anything else;
- generation drops the held-out text from its batches (validation's too), so it reports no exact
  match.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jaxtyping import Integer
from omegaconf import DictConfig
from torch import Tensor

from xdllm.collate.prompts import without_target_ids
from xdllm.data.prepared_task import PreparedTask
from xdllm.errors import XdllmError

ANSWER_ROLES = ["loss", "prediction"]
FREE_TEXT_ROLES = ["loss"]
HIGHER_IS_BETTER = ("val/exact_match", "val/token_accuracy", "val/choice_accuracy", "val/choice_accuracy_per_token",
                    "val/choice_accuracy_per_char")
ONE_TEXT_WARNING = ("all %d samples are the same text: decoding without sampling (predictor.temperature=0, the "
                    "predictors' default) writes one text for an empty prompt; sample with predictor.temperature=1.0")


def same_rows(ids: Integer[Tensor, "batch width"], row: Integer[Tensor, " row_width"]) -> bool:
    """Whether every row of ``ids`` equals ``row``."""
    return ids.shape[1] == row.shape[0] and bool((ids == row).all())


def is_free_text(task: Any) -> bool:
    """A task whose samples have no prompt: its targets are free text, not answers."""
    return task.max_prompt_len == 0


def apply_task_defaults(config: DictConfig, task: Any) -> None:
    """Fill ``data.validation_roles``, ``checkpoint.monitor`` and ``checkpoint.mode`` where they
    are null, for a task with answers or for free text (module doc)."""
    free_text = is_free_text(task)
    judged = config.get("judge") is not None  # a judge scores the texts validation generates
    if config.data.get("validation_roles") is None:
        config.data.validation_roles = FREE_TEXT_ROLES if free_text and not judged else ANSWER_ROLES
    if free_text and not judged and "loss" not in config.data.validation_roles:
        roles = ", ".join(config.data.validation_roles)
        raise XdllmError(f"data.validation_roles=[{roles}] logs no metric on free text: its generations have no "
                         "reference to score (and no judge= scores them); add loss, or give judge=<an arlm run with "
                         "the same tokenizer>")
    if config.checkpoint.get("monitor") is None:
        scores_answers = "prediction" in config.data.validation_roles and not free_text
        config.checkpoint.monitor = "val/exact_match" if scores_answers else "val/loss"
    if config.checkpoint.get("mode") is None:
        config.checkpoint.mode = "max" if config.checkpoint.monitor in HIGHER_IS_BETTER else "min"


def check_text_samples_fit(config: DictConfig, task: Any) -> None:
    """The free-text samples generated after training (``text_samples_after_train``) come from the
    test split's (empty) prompts: a prepared dataset must hold that many test samples, or the run
    would fail only once training is over."""
    wanted = config.text_samples_after_train
    generates = config.generate_after_train and config.data.num_test_samples > 0
    if not (generates and is_free_text(task) and isinstance(task, PreparedTask)):  # prepared: splits of fixed size
        return
    available = task.split_size("test")  # at least 1: the datamodule refused an empty split it was asked samples of
    if wanted > available:
        raise XdllmError(f"text_samples_after_train={wanted} is more than the {available} samples of the prepared "
                         f"data's test split, whose empty prompts they are generated from: set "
                         f"text_samples_after_train to at most {available}")


def without_targets(batches: Iterable[Mapping[str, Any]]) -> Iterator[dict[str, Any]]:
    """The batches without ``target_ids``: nothing to score generated free text against."""
    for batch in batches:
        yield without_target_ids(batch)
