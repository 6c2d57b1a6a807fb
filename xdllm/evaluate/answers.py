"""The evaluator of families whose samples have answers: loss, exact match, token accuracy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from xdllm.evaluate.evaluation_loss import batch_token_counts
from xdllm.evaluate.totals import count_weighted
from xdllm.interfaces import LossFunction, MetricSums, PredictionDict, Tokenizer
from xdllm.predict.metrics import match_output_regions


class AnswerEvaluator:
    """Validation loss, and exact match / token accuracy of the predicted answers.

    - ``loss``: the family loss of each batch, weighted by the count it averages over, so that
      ``val/loss`` is the exact mean over the split's tokens whatever the batch split: the
      loss's one ``token_counts`` entry (a :class:`~xdllm.interfaces.GlobalCountLoss` with a
      single count: MLM, MDLM, BD3-LM, DFlash); with ``loss_weight``, that entry of the loss's
      output instead (for a loss without ``token_counts``); else (no counts, or several: give
      such a family its own evaluator, as hybrid and UDLM have) the batch's sample count.
    - ``exact_match``, ``token_accuracy``: :func:`~xdllm.predict.metrics.match_output_regions`
      against ``batch["target_ids"]``; present only when the batch has targets.

    Records: the sample index, the prompt and output text, the output ids, steps and time, and
    with targets the target text and the per-sample match.
    """

    def __init__(self, tokenizer: Tokenizer, loss_weight: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.loss_weight = loss_weight

    def loss_metrics(self, model: torch.nn.Module, batch: Mapping[str, Any],
                     loss_fn: LossFunction) -> MetricSums:
        return self.loss_metrics_of(loss_fn(model, batch), batch, loss_fn)

    def loss_metrics_of(self, out: Mapping[str, Tensor], batch: Mapping[str, Any],
                        loss_fn: LossFunction) -> MetricSums:
        """:meth:`loss_metrics` of the loss's output ``out`` on ``batch``."""
        return {"loss": count_weighted(out["loss"], self._loss_weight(out, batch, loss_fn))}

    def _loss_weight(self, out: Mapping[str, Tensor], batch: Mapping[str, Any], loss_fn: LossFunction) -> Tensor:
        if self.loss_weight is not None:
            if self.loss_weight not in out:
                raise ValueError(f"{type(self).__name__}: loss_weight={self.loss_weight!r} is not an entry of the "
                                 f"loss's output, which has: {', '.join(sorted(out))} (evaluator.loss_weight=null "
                                 "weighs each batch by the loss's token count, or by its samples)")
            return out[self.loss_weight]
        counts = batch_token_counts(loss_fn, batch)
        if counts is not None and len(counts) == 1:
            return next(iter(counts.values()))
        return torch.tensor(float(batch["input_ids"].shape[0]), device=out["loss"].device)

    def _match(self, batch: Mapping[str, Any], prediction: PredictionDict):
        if "target_ids" not in batch:
            return None
        return match_output_regions(prediction["ids"], prediction["output_start_idx"], batch["target_ids"],
                                    self.tokenizer.eos_token_id, self.tokenizer.pad_token_id)

    def prediction_metrics(self, batch: Mapping[str, Any], prediction: PredictionDict) -> MetricSums:
        match = self._match(batch, prediction)
        if match is None:
            return {}
        rows = torch.tensor(float(match.exact.numel()), device=match.exact.device)
        return {"exact_match": (match.exact.sum(), rows),
                "token_accuracy": (match.correct.sum(), match.length.sum())}

    def finalize(self, means: Mapping[str, float]) -> dict[str, float]:
        return dict(means)

    def records(self, batch: Mapping[str, Any], prediction: PredictionDict) -> list[dict[str, Any]]:
        """One JSON record per sample; tensors are copied to Python once per batch."""
        tokenizer = self.tokenizer
        ids, starts = prediction["ids"].tolist(), prediction["output_start_idx"].tolist()
        prompts, real = batch["input_ids"].tolist(), batch["attention_mask"].tolist()
        indices = batch["sample_index"].tolist() if "sample_index" in batch else range(len(ids))
        match = self._match(batch, prediction)
        if match is not None:
            targets = batch["target_ids"].tolist()
            exact, correct, length = match.exact.tolist(), match.correct.tolist(), match.length.tolist()
        records = []
        for row, text in enumerate(prediction["text"]):
            prompt = [token for token, keep in zip(prompts[row], real[row]) if keep]
            infilling = tokenizer.mask_token_id in prompt  # show the masks that were filled
            record = {
                "sample_index": indices[row],
                "prompt": tokenizer.decode(prompt, skip_special_tokens=not infilling),
                "text": text,
                "ids": ids[row][starts[row]:],
                "steps_taken": prediction["steps_taken"][row],
                "time_taken": prediction["time_taken"][row],
            }
            if match is not None:
                record["target"] = tokenizer.decode(targets[row])
                record["exact_match"] = exact[row]
                record["correct_tokens"] = correct[row]
                record["target_tokens"] = length[row]
            records.append(record)
        return records
