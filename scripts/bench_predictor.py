"""Benchmark the unmasking predictor: accuracy, forward passes, speed, and engine overhead.

For each confidence mode, with and without a threshold, over the same prompts:
exact match and token accuracy against the targets, forward passes per sample, wall time per
generated token, and the share of wall time spent outside the model's forward pass (the
engine's own overhead; target < 10% at batch 64 on CPU).

    python scripts/bench_predictor.py --ckpt runs/quick            # a trained run
    python scripts/bench_predictor.py --random-model               # no checkpoint needed
    python scripts/bench_predictor.py --random-model --remask      # the same, remasking (Mask-Predict)

The last line printed is one JSON object with every row of the table.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from xdllm.interfaces import Tokenizer
from xdllm.predict import UnmaskingPredictor, match_output_regions

THRESHOLDS = {"top_prob": 0.9, "prob_diff": 0.8, "entropy": -0.3}
"""Threshold per mode in the threshold rows (entropy scores are -H in nats)."""


class TimedModel(nn.Module):
    """Wraps a model and adds up the wall time of its forward calls."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.seconds = 0.0

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.timed(self.model, *args, **kwargs)

    def timed(self, call: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        cuda = next(self.model.parameters()).is_cuda
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = call(*args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - start
        return out


class TimedHiddenModel(TimedModel):
    """A :class:`TimedModel` offering the wrapped model's ``final_hidden`` (timed) and
    ``lm_head_weight``, so the engine projects only the output window, as for the bare model (that
    projection then counts as outside the model)."""

    def final_hidden(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.timed(self.model.final_hidden, *args, **kwargs)

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.model.lm_head_weight


def timed_model(model: nn.Module) -> TimedModel:
    exposes_hidden = hasattr(model, "final_hidden") and hasattr(model, "lm_head_weight")
    return TimedHiddenModel(model) if exposes_hidden else TimedModel(model)


@dataclass
class ModeResult:
    confidence: str
    threshold: float | None
    exact_match: float
    token_accuracy: float
    forward_passes_per_sample: float
    ms_per_token: float
    outside_model_share: float


def bench_mode(model: nn.Module, tokenizer: Tokenizer, batches: list[Mapping[str, Any]],
               max_new_tokens: int, max_steps: int, confidence: str | None,
               threshold: float | None, repeats: int, remask: bool = False) -> ModeResult:
    """Run one predictor setting over ``batches``; timings from the fastest of ``repeats``."""
    predictor = UnmaskingPredictor(max_steps=max_steps, max_new_tokens=max_new_tokens,
                                   tokenizer=tokenizer, confidence=confidence,
                                   threshold=threshold, remask=remask)
    predictor.predict(batches[0], model=model)  # warm-up, not timed
    best_total, best_model = float("inf"), 0.0
    for _ in range(repeats):
        timed = timed_model(model)
        start = time.perf_counter()
        predictions = [predictor.predict(batch, model=timed) for batch in batches]
        total = time.perf_counter() - start
        if total < best_total:
            best_total, best_model = total, timed.seconds
    correct = length = exact = samples = passes = 0
    for batch, prediction in zip(batches, predictions):
        passes += sum(prediction["steps_taken"])
        samples += len(prediction["steps_taken"])
        if "target_ids" in batch:
            match = match_output_regions(prediction["ids"], prediction["output_start_idx"],
                                         batch["target_ids"], tokenizer.eos_token_id,
                                         tokenizer.pad_token_id)
            correct += int(match.correct.sum())
            length += int(match.length.sum())
            exact += int(match.exact.sum())
    return ModeResult(
        confidence=str(confidence), threshold=threshold,
        exact_match=exact / max(samples, 1), token_accuracy=correct / max(length, 1),
        forward_passes_per_sample=passes / max(samples, 1),
        ms_per_token=1000.0 * best_total / max(samples * max_new_tokens, 1),
        outside_model_share=1.0 - best_model / best_total)


def bench(model: nn.Module, tokenizer: Tokenizer, batches: list[Mapping[str, Any]],
          max_new_tokens: int, max_steps: int, repeats: int = 3, remask: bool = False) -> list[ModeResult]:
    """Every confidence mode, without and with its threshold (random order: without only)."""
    results = []
    for confidence in ("top_prob", "prob_diff", "entropy", None):
        thresholds = [None] if confidence is None else [None, THRESHOLDS[confidence]]
        for threshold in thresholds:
            results.append(bench_mode(model, tokenizer, batches, max_new_tokens, max_steps,
                                      confidence, threshold, repeats, remask))
    return results


def random_model_setup(batch_size: int, n_batches: int, prompt_len: int
                       ) -> tuple[nn.Module, Tokenizer, list[dict[str, torch.Tensor]]]:
    """A randomly initialised MLM transformer and random digit prompts (no targets)."""
    from xdllm.data.tokenizer import builtin_tokenizer
    from xdllm_models.mlm.model import RotaryTransformerMLMModel

    tokenizer = builtin_tokenizer()
    torch.manual_seed(0)
    model = RotaryTransformerMLMModel(tokenizer.vocab_size, max_positions=512,
                                      attn_backend="sdpa").eval()
    generator = torch.Generator().manual_seed(0)
    batches = []
    for index in range(n_batches):
        ids = torch.randint(4, tokenizer.vocab_size, (batch_size, prompt_len), generator=generator)
        ids[:, 0] = tokenizer.bos_token_id
        batches.append({"input_ids": ids,
                        "attention_mask": torch.ones_like(ids, dtype=torch.bool),
                        "sample_index": torch.arange(batch_size) + index * batch_size})
    return model, tokenizer, batches


def trained_setup(ckpt: str, batch_size: int, n_batches: int
                  ) -> tuple[nn.Module, Tokenizer, list[Mapping[str, Any]], int]:
    """A trained run's model, tokenizer and test prompts collated ``batch_size`` at a time."""
    from xdllm.run.checkpoint import load_trained

    run = load_trained(ckpt)
    datamodule = run.datamodule()
    datamodule.setup("test")
    examples = datamodule.held_out_examples("test")[:batch_size * n_batches]
    batches = [datamodule.prediction_collator(examples[i:i + batch_size])
               for i in range(0, len(examples), batch_size)]
    return run.model, run.tokenizer, batches, run.max_new_tokens


def print_table(results: Iterable[ModeResult]) -> None:
    header = (f"{'confidence':>10} {'threshold':>9} {'exact':>6} {'tok_acc':>7} "
              f"{'passes':>7} {'ms/tok':>7} {'outside':>7}")
    print(header)
    for r in results:
        threshold = "-" if r.threshold is None else f"{r.threshold:g}"
        print(f"{r.confidence:>10} {threshold:>9} {r.exact_match:6.3f} {r.token_accuracy:7.3f} "
              f"{r.forward_passes_per_sample:7.2f} {r.ms_per_token:7.3f} "
              f"{100 * r.outside_model_share:6.1f}%")


def add_source_arguments(parser: argparse.ArgumentParser, max_new_tokens: int, prompt_len: int) -> None:
    """What to decode (a trained run's test prompts or a random model's random prompts), and the
    timing options both benchmarks share."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ckpt", help="checkpoint file or run directory")
    source.add_argument("--random-model", action="store_true",
                        help="randomly initialised MLM transformer on random prompts")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=None,
                        help="default: max_new_tokens (one token per step at most)")
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens, help="random model only")
    parser.add_argument("--prompt-len", type=int, default=prompt_len, help="random model only")
    parser.add_argument("--repeats", type=int, default=3, help="timings: fastest of this many")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")


def load_source(args: argparse.Namespace) -> tuple[nn.Module, Tokenizer, list[Mapping[str, Any]], int]:
    """The model, tokenizer, prompt batches and new tokens that :func:`add_source_arguments` chose
    (after setting torch's CPU threads, when given)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.ckpt:
        return trained_setup(args.ckpt, args.batch_size, args.batches)
    model, tokenizer, batches = random_model_setup(args.batch_size, args.batches, args.prompt_len)
    return model, tokenizer, batches, args.max_new_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_source_arguments(parser, max_new_tokens=16, prompt_len=16)
    parser.add_argument("--remask", action="store_true", help="every setting with remask=True (Mask-Predict)")
    args = parser.parse_args()
    model, tokenizer, batches, max_new_tokens = load_source(args)
    max_steps = args.max_steps or max_new_tokens
    results = bench(model, tokenizer, batches, max_new_tokens, max_steps, args.repeats, args.remask)
    print(f"batch_size={args.batch_size} batches={len(batches)} max_new_tokens={max_new_tokens} "
          f"max_steps={max_steps} remask={args.remask} device={next(model.parameters()).device} "
          f"threads={torch.get_num_threads()} repeats={args.repeats}")
    print_table(results)
    print(json.dumps({"batch_size": args.batch_size, "batches": len(batches),
                      "max_new_tokens": max_new_tokens, "max_steps": max_steps, "remask": args.remask,
                      "source": args.ckpt or "random-model",
                      "results": [asdict(r) for r in results]}))


if __name__ == "__main__":
    main()
