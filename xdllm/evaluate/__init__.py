"""Validation metrics and prediction records: the ``(sum, count)`` accumulator the harness and
``xdllm generate`` / ``eval`` share, and the answer-matching evaluator most families use."""

from xdllm.evaluate.answers import AnswerEvaluator
from xdllm.evaluate.totals import MetricTotals

__all__ = ["AnswerEvaluator", "MetricTotals"]
