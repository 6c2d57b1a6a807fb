"""Benchmark the predictor's approximate prefix cache (``prefix_cache=true``): speed and agreement.

For each block setting and refresh interval, the same prompts are decoded without and with the
cache: wall time
(fastest of ``--repeats``, the two interleaved), the speed-up as a ratio, the share of generated
tokens the two agree on, and, for a trained run, exact match and token accuracy of each.

    python scripts/bench_prefix_cache.py --ckpt runs/sort_mlm --refresh 0 2 3   # a trained run
    python scripts/bench_prefix_cache.py --random-model --prompt-len 256        # a long prompt
    python scripts/bench_prefix_cache.py --ckpt runs/sort_mlm --block-sizes 3 --dual   # the dual cache too
    python scripts/bench_prefix_cache.py --ckpt runs/sort_mlm --threshold 0.9   # rows finishing at their own steps
    python scripts/bench_prefix_cache.py --random-model --weight-std 0.3 --threshold 0.5 --block-sizes 16 --dual
        # peaked outputs: under the threshold rows go at their own paces, block by block

The last line printed is one JSON object with every row.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from typing import Any

import torch
from bench_predictor import add_source_arguments, load_source
from torch import nn

from xdllm.interfaces import Tokenizer
from xdllm.predict import UnmaskingPredictor, match_output_regions


def decode_all(predictor: UnmaskingPredictor, model: nn.Module, batches: list[Mapping[str, Any]]
               ) -> tuple[float, list[dict[str, Any]]]:
    """Wall time and predictions of one pass over ``batches``."""
    start = time.perf_counter()
    predictions = [predictor.predict(batch, model=model) for batch in batches]
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start, predictions


def scores(predictions: list[dict[str, Any]], batches: list[Mapping[str, Any]],
           tokenizer: Tokenizer) -> dict[str, float] | None:
    """Exact match and token accuracy against the batches' targets (None without targets)."""
    if not all("target_ids" in batch for batch in batches):
        return None
    exact = correct = length = samples = 0
    for batch, prediction in zip(batches, predictions):
        match = match_output_regions(prediction["ids"], prediction["output_start_idx"], batch["target_ids"],
                                     tokenizer.eos_token_id, tokenizer.pad_token_id)
        exact += int(match.exact.sum())
        correct += int(match.correct.sum())
        length += int(match.length.sum())
        samples += len(prediction["steps_taken"])
    return {"exact_match": exact / samples, "token_accuracy": correct / max(length, 1)}


def agreement(plain: list[dict[str, Any]], cached: list[dict[str, Any]], max_new_tokens: int) -> float:
    """Share of generated tokens the cached decoding writes as the plain one does."""
    same = total = 0
    for a, b in zip(plain, cached):
        start = int(a["output_start_idx"][0])
        region_a, region_b = a["ids"][:, start:start + max_new_tokens], b["ids"][:, start:start + max_new_tokens]
        same += int((region_a == region_b).sum())
        total += region_a.numel()
    return same / total


def bench_setting(model: nn.Module, tokenizer: Tokenizer, batches: list[Mapping[str, Any]],
                  max_new_tokens: int, max_steps: int, block_size: int | None, refresh: int | None,
                  dual: bool, repeats: int, threshold: float | None = None) -> dict[str, Any]:
    options = dict(max_steps=max_steps, max_new_tokens=max_new_tokens, tokenizer=tokenizer,
                   confidence="top_prob", block_size=block_size, threshold=threshold)
    plain_predictor = UnmaskingPredictor(**options)
    cached_predictor = UnmaskingPredictor(**options, prefix_cache=True, prefix_cache_refresh=refresh,
                                          dual_cache=dual)
    plain_predictor.predict(batches[0], model=model)  # warm-up, not timed
    cached_predictor.predict(batches[0], model=model)
    plain_best = cached_best = float("inf")
    for _ in range(repeats):
        plain_time, plain = decode_all(plain_predictor, model, batches)
        cached_time, cached = decode_all(cached_predictor, model, batches)
        plain_best, cached_best = min(plain_best, plain_time), min(cached_best, cached_time)
    return {"block_size": block_size, "refresh": refresh, "dual": dual, "plain_s": plain_best, "cached_s": cached_best,
            "speedup": plain_best / cached_best, "agreement": agreement(plain, cached, max_new_tokens),
            "plain_scores": scores(plain, batches, tokenizer), "cached_scores": scores(cached, batches, tokenizer)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_source_arguments(parser, max_new_tokens=32, prompt_len=256)
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[0],
                        help="block sizes to compare (0: the whole output is one block)")
    parser.add_argument("--refresh", type=int, nargs="+", default=[0],
                        help="prefix_cache_refresh values to compare (0: none)")
    parser.add_argument("--dual", action="store_true",
                        help="with block sizes: also the dual cache (the later blocks' keys kept too)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="confidence threshold (top_prob) for both decodings: rows then finish at their own steps")
    parser.add_argument("--weight-std", type=float, default=None,
                        help="random model: redraw its matrices from N(0, std^2) (0.3: peaked outputs, rows at "
                             "their own paces under a threshold; the init's 0.02 gives near-uniform ones)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args()
    model, tokenizer, batches, max_new_tokens = load_source(args)
    if args.weight_std is not None:
        if args.ckpt:
            parser.error("--weight-std redraws a random model's weights; not with --ckpt")
        torch.manual_seed(0)
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.dim() == 2:
                    parameter.normal_(0.0, args.weight_std)
    model = model.to(args.device)
    batches = [{key: value.to(args.device) if isinstance(value, torch.Tensor) else value
                for key, value in batch.items()} for batch in batches]
    max_steps = args.max_steps or max_new_tokens
    rows = [bench_setting(model, tokenizer, batches, max_new_tokens, max_steps, size or None, refresh or None,
                          dual, args.repeats, args.threshold)
            for size in args.block_sizes for refresh in args.refresh
            for dual in ([False, True] if args.dual and size else [False])]
    prompt_len = batches[0]["input_ids"].shape[1]
    print(f"source={args.ckpt or 'random-model'} batch_size={args.batch_size} batches={len(batches)} "
          f"prompt columns={prompt_len} max_new_tokens={max_new_tokens} max_steps={max_steps} "
          f"threshold={args.threshold} weight_std={args.weight_std}\n"
          f"device={args.device} threads={torch.get_num_threads()} repeats={args.repeats}")
    print(f"{'block':>6} {'refresh':>7} {'dual':>4} {'plain s':>8} {'cached s':>9} {'speed-up':>8} {'agree':>6} "
          f"{'exact plain':>11} {'exact cached':>12}")
    for row in rows:
        exact = [("-" if s is None else f"{s['exact_match']:.4f}") for s in (row["plain_scores"], row["cached_scores"])]
        print(f"{str(row['block_size'] or '-'):>6} {str(row['refresh'] or '-'):>7} "
              f"{'yes' if row['dual'] else '-':>4} {row['plain_s']:8.3f} "
              f"{row['cached_s']:9.3f} {row['speedup']:7.2f}x {row['agreement']:6.3f} {exact[0]:>11} {exact[1]:>12}")
    print(json.dumps({"benchmark": "prefix_cache", "source": args.ckpt or "random-model",
                      "batch_size": args.batch_size, "batches": len(batches), "prompt_columns": prompt_len,
                      "max_new_tokens": max_new_tokens, "max_steps": max_steps,
                      "threshold": args.threshold, "weight_std": args.weight_std,
                      "device": args.device, "threads": torch.get_num_threads(), "rows": rows}))


if __name__ == "__main__":
    main()
