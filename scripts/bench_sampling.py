"""Time of the token choice per denoising step: the final distribution and the draw from it.

For each vocabulary size, :func:`xdllm.predict.sampling.final_distribution` and
:func:`~xdllm.predict.sampling.choose_tokens` run on random logits of ``[batch, positions,
vocab]`` under four settings: argmax (temperature 0), sampling at temperature 1, with ``top_k``,
and with ``top_p``; ``top_p`` also on peaked logits (the same ones times
:data:`PEAKED_SCALE`: a nucleus of about a dozen tokens at 32k, as at a trained model's confident
positions; the flat ones hold most of the vocabulary in theirs), where the CPU path finds the
nucleus among the largest logits without sorting the vocabulary. The inverse-CDF lookup of a
sampled token is also timed against its definition, counting the CDF entries at or below the
draw (what the code did before it used ``searchsorted``); both give the same tokens, checked.
Prints one JSON line; times are medians (ms) of ``--repeats`` runs.

Usage: ``python scripts/bench_sampling.py [--device cuda] [--threads 1] [--vocab 46 4096 32768]
[--batch 4] [--positions 64] [--repeats 20]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence

import torch

from xdllm.predict.sampling import choose_tokens, final_distribution

PEAKED_SCALE = 6.0
SETTINGS = {"argmax": (0.0, None, None), "sample": (1.0, None, None), "top_k_50": (1.0, 50, None),
            "top_p_0.9": (1.0, None, 0.9)}


def _median_ms(run: Callable[[], object], repeats: int, device: str) -> float:
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - start))
    return round(statistics.median(times), 4)


def counted_choice(probs: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """The inverse-CDF token by definition: how many CDF entries lie at or below the draw."""
    cdf = probs.cumsum(-1)
    return (cdf <= (draws * cdf[..., -1])[..., None]).sum(-1).clamp(max=probs.shape[-1] - 1)


def measure(vocab: int, batch: int, positions: int, repeats: int, device: str) -> dict:
    generator = torch.Generator(device=device).manual_seed(0)
    logits = torch.randn(batch, positions, vocab, generator=generator, device=device)
    draws = torch.rand(batch, positions, generator=generator, device=device)
    result: dict = {"vocab": vocab}
    for name, (temperature, top_k, top_p) in SETTINGS.items():
        step_draws = None if temperature == 0.0 else draws
        result[f"{name}_ms"] = _median_ms(
            lambda: choose_tokens(final_distribution(logits, temperature, top_k, top_p, (1,)), step_draws),
            repeats, device)
    peaked = logits * PEAKED_SCALE
    result["top_p_0.9_peaked_ms"] = _median_ms(
        lambda: choose_tokens(final_distribution(peaked, 1.0, None, 0.9, (1,)), draws), repeats, device)
    probs = final_distribution(logits, 1.0, None, None, (1,))
    if not torch.equal(choose_tokens(probs, draws), counted_choice(probs, draws)):
        raise RuntimeError(f"vocab {vocab}: searchsorted and counted inverse-CDF choices differ")
    result["lookup_ms"] = _median_ms(lambda: choose_tokens(probs, draws), repeats, device)
    result["counted_lookup_ms"] = _median_ms(lambda: counted_choice(probs, draws), repeats, device)
    result["counted_over_lookup"] = round(result["counted_lookup_ms"] / result["lookup_ms"], 2)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vocab", type=int, nargs="+", default=[46, 4096, 32768])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--positions", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = [measure(vocab, args.batch, args.positions, args.repeats, args.device) for vocab in args.vocab]
    device = torch.cuda.get_device_name() if args.device == "cuda" else f"cpu, {args.threads} thread(s)"
    print(json.dumps({"bench": "sampling", "device": device, "torch": torch.__version__, "batch": args.batch,
                      "positions": args.positions, "results": results}))


if __name__ == "__main__":
    main()
