"""The evaluator of families whose samples have answers: loss, exact match, token accuracy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from xdllm.interfaces import LossFunction, MetricSums, PredictionDict, Tokenizer
from xdllm.predict.metrics import match_output_regions


class AnswerEvaluator:
    """Validation loss, and exact match / token accuracy of the predicted answers.

    - ``loss``: the family loss of each batch, weighted by the batch's sample count, or with
      ``loss_weight`` by that entry of the loss's output: the count the loss averages over (MLM:
      ``masked_tokens``), which makes ``val/loss`` the exact mean over the split's tokens,
      whatever the batch split.
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
        out = loss_fn(model, batch)
        loss = out["loss"].detach()
        if self.loss_weight is None:
            weight = torch.tensor(float(batch["input_ids"].shape[0]), device=loss.device)
        elif self.loss_weight in out:
            weight = out[self.loss_weight].detach().to(loss.dtype)
        else:
            raise ValueError(f"AnswerEvaluator: loss_weight={self.loss_weight!r} is not an entry of the loss's "
                             f"output, which has: {', '.join(sorted(out))} (evaluator.loss_weight=null weighs "
                             "each batch by its samples)")
        return {"loss": (loss * weight, weight)}

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
