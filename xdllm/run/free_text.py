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
- ``xdllm generate`` writes free text from empty prompts, reading nothing of the split
  (``prompt_sources.free_text_prompts``), and validation drops the held-out text from its
  batches, so neither reports exact match.
"""

from __future__ import annotations

from typing import Any

from jaxtyping import Integer
from omegaconf import DictConfig
from torch import Tensor

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
