"""Task-specific answer scores on top of any family's evaluator.

A task that defines ``answer_scores(prompt, target, output)`` (symbols in, ``{name: (sum,
count)}`` out; :class:`~xdllm.data.builtin_tasks.SudokuTask` does) gets those scores as extra metrics of
every generation (``val/<name>`` during training, the JSON of ``xdllm generate``) and per-sample
fields in ``predictions.jsonl``, whatever the family.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch

from xdllm.interfaces import Evaluator, LossFunction, MetricSums, PredictionDict, Tokenizer


@runtime_checkable
class ScoredTask(Protocol):
    """A task with its own answer scores (see the module docstring)."""

    def answer_scores(self, prompt: list[str], target: list[str],
                      output: list[str]) -> dict[str, tuple[float, float]]: ...


class TaskScoredEvaluator:
    """``inner`` plus the task's :meth:`ScoredTask.answer_scores` of every predicted answer.

    Symbols are taken token by token (special tokens dropped from prompt and target, kept in
    the output, where a leftover ``<mask>`` or an early ``<eos>`` makes the answer wrong rather
    than shifting the cells after it). The output region is as long as the target.
    """

    def __init__(self, inner: Evaluator, task: ScoredTask, tokenizer: Tokenizer) -> None:
        self.inner = inner
        self.task = task
        self.tokenizer = tokenizer

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        return self.inner.loss_metrics(model, batch, loss_fn)

    def _scores(self, batch: Mapping[str, Any], prediction: PredictionDict) -> list[dict[str, tuple[float, float]]]:
        if "target_ids" not in batch:
            return []
        special = set(self.tokenizer.special_token_ids)
        token = self.tokenizer.id_to_token
        ids, starts = prediction["ids"].tolist(), prediction["output_start_idx"].tolist()
        prompts, real = batch["input_ids"].tolist(), batch["attention_mask"].tolist()
        scores = []
        for row, target_ids in enumerate(batch["target_ids"].tolist()):
            prompt = [token(t) for t, keep in zip(prompts[row], real[row]) if keep and t not in special]
            target = [token(t) for t in target_ids if t not in special]
            output = [token(t) for t in ids[row][starts[row]:starts[row] + len(target)]]
            scores.append(self.task.answer_scores(prompt, target, output))
        return scores

    def prediction_metrics(self, batch: Mapping[str, Any], prediction: PredictionDict) -> MetricSums:
        metrics = dict(self.inner.prediction_metrics(batch, prediction))
        scores = self._scores(batch, prediction)
        device = prediction["ids"].device
        for name in scores[0] if scores else ():
            total = sum(score[name][0] for score in scores)
            count = sum(score[name][1] for score in scores)
            metrics[name] = (torch.tensor(total, device=device), torch.tensor(count, device=device))
        return metrics

    def finalize(self, means: Mapping[str, float]) -> dict[str, float]:
        return self.inner.finalize(means)

    def records(self, batch: Mapping[str, Any], prediction: PredictionDict) -> list[dict[str, Any]]:
        records = self.inner.records(batch, prediction)
        for record, score in zip(records, self._scores(batch, prediction)):
            record.update({name: total / count if count else None for name, (total, count) in score.items()})
        return records
