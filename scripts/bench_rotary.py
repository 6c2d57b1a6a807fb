"""Benchmark ``apply_rotary`` against the pairwise formula it replaced.

The pairwise formula rotates each half apart, ``(a cos - b sin, b cos + a sin)``, concatenated:
it is what checkpoints before b53abf7 were trained with, and ``apply_rotary`` must give its bits
(checked here before timing, as in ``tests/nn/test_rotary.py``). Inputs are attention's query
views: a strided ``[batch, heads, seq_len, head_dim]`` slice of the fused q/k/v projection. The
two are timed in back-to-back pairs (order swapped every pair), so load from other processes
falls on both alike; the figure is the median over the pairs of pairwise time / ``apply_rotary``
time (> 1: ``apply_rotary`` is faster), forward and forward + backward.

Usage: ``python scripts/bench_rotary.py [--threads N] [--pairs N] [--device cpu|cuda]``. Prints
one JSON line per shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from torch import Tensor

from xdllm.nn.rotary import apply_rotary

SHAPES = {  # (batch, heads, seq_len, head_dim)
    "sudoku eval (64 puzzles)": (64, 4, 164, 32),
    "sort training": (64, 4, 18, 32),
    "wide": (8, 8, 512, 64),
}


def pairwise_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Each half rotated apart: the formula ``apply_rotary`` replaced (on the halves of its tables
    ``[cos, cos]``, ``[-sin, sin]``)."""
    x32 = x.float()
    first, second = x32.chunk(2, dim=-1)
    cos, sin = cos.chunk(2, dim=-1)[0][:, None], sin.chunk(2, dim=-1)[1][:, None]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1).type_as(x)


def _inputs(shape: tuple[int, int, int, int], device: str, grad: bool) -> tuple[Tensor, Tensor, Tensor]:
    batch, heads, seq_len, head_dim = shape
    fused = torch.randn(batch, seq_len, 3, heads, head_dim, device=device, requires_grad=grad)
    query = fused.permute(2, 0, 3, 1, 4)[0]
    angles = torch.rand(batch, seq_len, head_dim // 2, device=device) * 100
    cos, sin = angles.cos(), angles.sin()
    return query, torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)


def _seconds(function: Callable[[], object], device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    function()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def _ratio(rotate: Callable, inputs: tuple[Tensor, Tensor, Tensor], backward: bool, pairs: int,
           device: str) -> float:
    """Median over back-to-back pairs of pairwise time / ``apply_rotary`` time."""
    def run(function: Callable) -> Callable[[], object]:
        def once() -> object:
            out = function(*inputs)
            if backward:
                out.sum().backward()
            return out
        return once

    ours, theirs = run(rotate), run(pairwise_rotary)
    for _ in range(3):  # warm-up
        ours(), theirs()
    ratios = []
    for pair in range(pairs):
        first, second = (ours, theirs) if pair % 2 == 0 else (theirs, ours)
        a, b = _seconds(first, device), _seconds(second, device)
        ours_s, theirs_s = (a, b) if pair % 2 == 0 else (b, a)
        ratios.append(theirs_s / ours_s)
    return statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for name, shape in SHAPES.items():
        query, cos, sin = _inputs(shape, args.device, grad=False)
        if not torch.equal(apply_rotary(query, cos, sin), pairwise_rotary(query, cos, sin)):
            raise SystemExit(f"{name}: apply_rotary and the pairwise formula disagree")
        forward = _ratio(apply_rotary, (query, cos, sin), False, args.pairs, args.device)
        with_grad = _inputs(shape, args.device, grad=True)
        both = _ratio(apply_rotary, with_grad, True, args.pairs, args.device)
        print(json.dumps({"bench": "rotary", "shape": name, "batch_heads_seq_dim": shape, "device": args.device,
                          "threads": torch.get_num_threads(), "same_bits": True,
                          "pairwise_over_apply_rotary_forward": round(forward, 3),
                          "pairwise_over_apply_rotary_forward_backward": round(both, 3)}))


if __name__ == "__main__":
    main()
