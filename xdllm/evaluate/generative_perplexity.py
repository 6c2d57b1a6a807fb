"""Generative perplexity: how likely an autoregressive judge finds generated text.

Unconditional samples of a diffusion LM have no reference to be scored against. The field
(MDLM, BD3-LM, ReMDM, UDLM) reports their perplexity under a separately trained autoregressive
model, "Gen PPL", next to the entropy of each sample's tokens: text that repeats itself is
likely under any judge yet poor, and its low entropy gives it away.

:class:`GenerativeJudge` scores every generated output given its prompt: the judge reads
``[bos] + prompt + output`` and the output's tokens are scored up to and including the first
EOS. The EOS that fills a canvas after the text is not scored (its amount depends on the canvas,
not on the text); an output without EOS is scored whole. Tokens a generation left as they were
(a mask, say) are scored as they are: the judge never predicts them, so they cost it much.

Per batch it gives the sums ``gen_nll`` (NLL over scored tokens, nats), ``gen_entropy`` (the
entropy of each sample's token counts before its EOS, nats, over samples) and ``gen_ended`` (the
share of outputs with an EOS: the others were cut by the canvas, and their perplexity does not
see that they never ended: run-on text that repeats its sentences reads as likely); ``gen_ppl =
exp(gen_nll)`` over the whole generation comes from :func:`judged_results`
(:func:`finalize_with_judge`: with a family evaluator's own results).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from xdllm.errors import XdllmError
from xdllm.evaluate.bounds import with_perplexities
from xdllm.interfaces import Evaluator, MetricSums, PredictionDict, Tokenizer
from xdllm.losses.token_nll import next_token_nll

JUDGE_METRICS = ("gen_nll", "gen_entropy", "gen_ended")
"""The metric sums the judge adds; ``gen_ppl`` is derived from ``gen_nll``."""


def token_entropy(tokens: Sequence[int]) -> float:
    """Entropy (nats) of the empirical distribution of ``tokens``; 0 for none."""
    counts = Counter(tokens).values()
    total = sum(counts)
    return -sum(count / total * math.log(count / total) for count in counts) if total else 0.0


@dataclass(frozen=True)
class JudgedBatch:
    """One batch's scores: per sample the NLL (nats, summed over its scored tokens), the number
    of scored tokens, the entropy of its text's tokens and whether its output has an EOS."""

    nll: list[float]
    tokens: list[int]
    entropy: list[float]
    ended: list[bool]

    def sums(self, device: torch.device) -> MetricSums:
        """``gen_nll`` per scored token, ``gen_entropy`` and ``gen_ended`` per sample, as ``(sum, count)``."""
        def pair(total: float, count: float) -> tuple[Tensor, Tensor]:
            return (torch.tensor(total, dtype=torch.float64, device=device),
                    torch.tensor(count, dtype=torch.float64, device=device))
        return {"gen_nll": pair(sum(self.nll), sum(self.tokens)),
                "gen_entropy": pair(sum(self.entropy), len(self.entropy)),
                "gen_ended": pair(sum(self.ended), len(self.ended))}

    def add_to(self, records: Sequence[dict[str, Any]]) -> None:
        """Each sample's ``gen_nll`` (nats per scored token; None when nothing was scored),
        ``gen_tokens``, ``gen_entropy`` and ``gen_ended`` into its prediction record."""
        for record, nll, tokens, entropy, ended in zip(records, self.nll, self.tokens, self.entropy, self.ended,
                                                       strict=True):
            record.update(gen_nll=nll / tokens if tokens else None, gen_tokens=tokens, gen_entropy=entropy,
                          gen_ended=ended)


class GenerativeJudge:
    """An autoregressive model (``model(input_ids, attention_mask=, positions=)`` -> next-token
    logits) that scores generated outputs; ``tokenizer`` is the vocabulary both share.
    ``checkpoint`` says which judge it is. ``max_positions``: the judge's
    longest sequence (None: unbounded)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer, checkpoint: Path,
                 max_positions: int | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.checkpoint = checkpoint
        self.max_positions = max_positions

    def sequences(self, batch: Mapping[str, Any], prediction: PredictionDict) -> tuple[list[list[int]], list[int]]:
        """Per sample ``[bos] + prompt + output through its first EOS`` and how many of its tokens
        are the prompt's (bos included)."""
        tokenizer = self.tokenizer
        bos, eos, mask = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.mask_token_id
        ids, starts = prediction["ids"].tolist(), prediction["output_start_idx"].tolist()
        prompts, real = batch["input_ids"].tolist(), batch["attention_mask"].tolist()
        sequences, prompt_lengths = [], []
        for row, (output_ids, start) in enumerate(zip(ids, starts)):
            prompt = [token for token, keep in zip(prompts[row], real[row]) if keep]
            prompt = prompt[1:] if prompt[:1] == [bos] else prompt
            if mask in prompt:
                raise XdllmError(f"judge: sample {row} of the batch has masks in its prompt (an infilling prompt); "
                                 "the judge scores text that continues its prompt, left to right")
            output = output_ids[start:]
            if eos in output:
                output = output[:output.index(eos) + 1]
            sequence = [bos, *prompt, *output]
            if self.max_positions is not None and len(sequence) > self.max_positions:
                raise XdllmError(f"judge: sample {row} of the batch is {len(sequence)} tokens with bos, prompt and "
                                 f"output; the judge {self.checkpoint} has max_positions={self.max_positions}")
            sequences.append(sequence)
            prompt_lengths.append(1 + len(prompt))
        return sequences, prompt_lengths

    def score(self, batch: Mapping[str, Any], prediction: PredictionDict) -> JudgedBatch:
        """The judge's scores of one batch's outputs: one forward pass, one copy to the host."""
        sequences, prompt_lengths = self.sequences(batch, prediction)
        device = prediction["ids"].device
        lengths = torch.tensor([len(sequence) for sequence in sequences], device=device)
        width = int(max(len(sequence) for sequence in sequences))
        input_ids = torch.full((len(sequences), width), self.tokenizer.pad_token_id, dtype=torch.long)
        for row, sequence in enumerate(sequences):
            input_ids[row, :len(sequence)] = torch.tensor(sequence)
        input_ids = input_ids.to(device)
        columns = torch.arange(width, device=device)
        attention_mask = columns[None, :] < lengths[:, None]
        logits = self.model(input_ids, attention_mask=attention_mask,
                            positions=columns[None, :].expand(len(sequences), -1))
        nll = next_token_nll(logits.float(), input_ids)  # column i predicts token i + 1
        predicted = columns[None, 1:]
        scored = (predicted >= torch.tensor(prompt_lengths, device=device)[:, None]) & (predicted < lengths[:, None])
        totals = torch.where(scored, nll, 0.0).sum(1).double()
        eos = self.tokenizer.eos_token_id
        texts = [sequence[length:] for sequence, length in zip(sequences, prompt_lengths)]
        ended = [text[-1:] == [eos] for text in texts]
        entropy = [token_entropy(text[:-1] if end else text) for text, end in zip(texts, ended)]
        return JudgedBatch(totals.tolist(), [len(text) for text in texts], entropy, ended)


def judged_results(means: Mapping[str, float]) -> dict[str, float]:
    """The judge's metrics of a whole generation (from its ``(sum, count)`` means): ``gen_nll``,
    ``gen_ppl``, ``gen_entropy`` and ``gen_ended``; empty when no judge scored it."""
    judged = {name: means[name] for name in JUDGE_METRICS if name in means}
    return with_perplexities(judged, [("gen_nll", "gen_ppl")])


def finalize_with_judge(evaluator: Evaluator, means: Mapping[str, float]) -> dict[str, float]:
    """``evaluator.finalize`` of the family's own means, and the judge's results beside them (a
    family's evaluator never sees the judge's sums)."""
    own = {name: mean for name, mean in means.items() if name not in JUDGE_METRICS}
    return {**evaluator.finalize(own), **judged_results(means)}
