"""Benchmark the corruption kernels and the fused DFlash loss.

Part 1: time of each corruption kernel at B=64, L=2048 (per sequence and with block sizes 32 and
256) against two baselines written below: a "reference" implementation in the straightforward
vectorised style (the formulas translated op by op, as an external library would write them),
which makes the same generator calls in the same order and shapes as xdllm's kernel, so its
outputs must be equal (checked before timing); and a per-row, per-block Python loop. Also the
per-sample seeded path (``corrupt_per_sample``). xdllm and the reference are timed in
back-to-back pairs (order swapped every pair), so that load from other processes falls on both
calls of a pair alike; the ratio reported is the median over the pairs of reference time / xdllm
time, >= 1 where xdllm is at least as fast.

Part 2: peak memory and time of ``DFlashDecayLoss.forward_fused`` against ``forward`` on
materialised logits, V=131072, T=4096, D=1024, float32 on CPU, forward + backward, with the
losses and gradients compared. Each path runs in a fresh subprocess; its peak memory is the
process's peak resident set size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, the kernel's
high-water mark) minus the resident size just before the forward pass (``/proc/self/statm``).
RSS sees every allocation torch makes; ``tracemalloc`` would not (it only traces Python's own
allocator), and a fresh process keeps one path's freed-but-cached memory out of the other's.

Usage: ``python scripts/bench_kernels.py [--quick] [--threads N] [--repeats N] [--skip-loss]``.
Prints tables, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from xdllm.diffusion import (
    corrupt_blockwise,
    corrupt_per_sample,
    corrupt_uniform,
    corrupt_uniform_random,
    gumbel_topk,
)

MASK_ID, VOCAB_SIZE, EPS = 3, 32000, 1e-3


# --------------------------------------------------------------------------- loop baselines


def _block_starts(seq_len: int, block_size: int | None) -> list[tuple[int, int]]:
    size = seq_len if block_size is None else block_size
    return [(start, min(start + size, seq_len)) for start in range(0, seq_len, size)]


def loop_uniform(ids, loss_mask, generator):
    """corrupt_uniform, one row at a time."""
    noisy, noise_mask = ids.clone(), torch.zeros_like(loss_mask)
    p_mask = torch.empty(ids.shape)
    for row in range(ids.shape[0]):
        level = EPS + (1 - EPS) * float(torch.rand((), generator=generator))
        row_noise = (torch.rand(ids.shape[1], generator=generator) < level) & loss_mask[row]
        noisy[row][row_noise] = MASK_ID
        noise_mask[row] = row_noise
        p_mask[row] = level
    return noisy, noise_mask, p_mask


def loop_blockwise(ids, loss_mask, generator, block_size, half_life_ratio=0.25):
    """corrupt_blockwise, one row and one block at a time, with the 1-D ``gumbel_topk``."""
    noisy, noise_mask = ids.clone(), torch.zeros_like(loss_mask)
    p_mask = torch.empty(ids.shape)
    for row in range(ids.shape[0]):
        for start, end in _block_starts(ids.shape[1], block_size):
            supervised = loss_mask[row, start:end]
            n = int(supervised.sum())
            level = EPS + (1 - EPS) * float(torch.rand((), generator=generator))
            k = min(round(level * n), n)
            if block_size is None and n > 0:
                k = max(k, 1)
            lam = math.log(2) / (half_life_ratio * (end - start))
            log_w = lam * (1 - level) * torch.arange(end - start, dtype=torch.float32)
            log_w[~supervised] = float("-inf")
            chosen = gumbel_topk(log_w, k, generator=generator)
            noisy[row, start:end][chosen] = MASK_ID
            noise_mask[row, start:end] = chosen
            p_mask[row, start:end] = level
    return noisy, noise_mask, p_mask


def loop_uniform_random(ids, loss_mask, generator, block_size):
    """corrupt_uniform_random, one row and one block at a time."""
    noisy, noise_mask = ids.clone(), torch.zeros_like(loss_mask)
    for row in range(ids.shape[0]):
        for start, end in _block_starts(ids.shape[1], block_size):
            level = EPS + (1 - EPS) * float(torch.rand((), generator=generator))
            chosen = (torch.rand(end - start, generator=generator) < level) & loss_mask[row, start:end]
            tokens = torch.randint(0, VOCAB_SIZE, (end - start,), generator=generator)
            noisy[row, start:end] = torch.where(chosen, tokens, noisy[row, start:end])
            noise_mask[row, start:end] = chosen
    return noisy, noise_mask, torch.ones(ids.shape)


# --------------------------------------------------------------------------- reference kernels
# The formulas written op by op on whole tensors: one level tensor, comparisons that broadcast
# it, ``torch.where`` for the ids, p_mask as a view where a view will do. Same generator calls,
# in the same order and shapes, as xdllm's kernels, hence the same outputs.


def reference_uniform(ids, loss_mask, generator):
    """corrupt_uniform: ``t ~ U[0, 1)`` per row, ``p = (1 - eps) t + eps``, Bernoulli(p) masks."""
    batch, seq_len = ids.shape
    t = torch.rand((batch, 1), generator=generator)
    p = (1 - EPS) * t + EPS
    noise_mask = (torch.rand((batch, seq_len), generator=generator) < p) & loss_mask.bool()
    return torch.where(noise_mask, MASK_ID, ids), noise_mask, p.expand(batch, seq_len)


def reference_blockwise(ids, loss_mask, generator, block_size, half_life_ratio=0.25):
    """corrupt_blockwise: one scope per row of an ``[rows, scope]`` view, Gumbel top-k by a sort."""
    batch, seq_len = ids.shape
    scope = seq_len if block_size is None else block_size
    num_scopes = math.ceil(seq_len / scope)
    rows, padded_len = batch * num_scopes, num_scopes * scope
    supervised = F.pad(loss_mask.bool(), (0, padded_len - seq_len)).view(rows, scope)
    n = supervised.sum(1)
    m = (1 - EPS) * torch.rand(rows, generator=generator) + EPS
    k = torch.round(m * n).long()
    if block_size is None:
        k = torch.maximum(k, (n > 0).long())
    k = torch.minimum(k, n)
    lengths = torch.full((batch, num_scopes), scope)
    lengths[:, -1] = seq_len - (num_scopes - 1) * scope
    lam = math.log(2) / (half_life_ratio * lengths.view(rows).float())
    log_w = (lam * (1 - m))[:, None] * torch.arange(scope, dtype=torch.float32)
    log_w[~supervised] = float("-inf")
    uniform = torch.rand((rows, scope), generator=generator).clamp(min=torch.finfo(torch.float32).tiny)
    gumbel = -torch.log(-torch.log(uniform))
    order = torch.sort(log_w + gumbel, dim=1, descending=True).indices
    picked = torch.arange(scope).expand(rows, scope) < k[:, None]
    chosen = torch.zeros((rows, scope), dtype=torch.bool).scatter_(1, order, picked)
    noise_mask = chosen.view(batch, padded_len)[:, :seq_len]
    p_mask = m.view(batch, num_scopes, 1).expand(batch, num_scopes, scope).reshape(batch, padded_len)
    return torch.where(noise_mask, MASK_ID, ids), noise_mask, p_mask[:, :seq_len]


def reference_uniform_random(ids, loss_mask, generator, block_size):
    """corrupt_uniform_random: ``t ~ U(eps, 1)`` per row or block, Bernoulli(t) random tokens."""
    batch, seq_len = ids.shape
    if block_size is None:
        t = (1 - EPS) * torch.rand((batch, 1), generator=generator) + EPS
        level = t.expand(batch, seq_len)
    else:
        num_blocks = math.ceil(seq_len / block_size)
        t = (1 - EPS) * torch.rand((batch, num_blocks, 1), generator=generator) + EPS
        level = t.expand(batch, num_blocks, block_size).reshape(batch, num_blocks * block_size)[:, :seq_len]
    noise_mask = (torch.rand((batch, seq_len), generator=generator) < level) & loss_mask.bool()
    tokens = torch.randint(0, VOCAB_SIZE, (batch, seq_len), generator=generator, dtype=ids.dtype)
    p_mask = torch.ones((batch, seq_len), dtype=torch.float32)
    return torch.where(noise_mask, tokens, ids), noise_mask, p_mask


# --------------------------------------------------------------------------- part 1


def _median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _paired_seconds(first: Callable[[], object], second: Callable[[], object], repeats: int,
                    warmup: int = 3) -> tuple[list[float], list[float]]:
    """Wall times of ``repeats`` back-to-back pairs of calls, the order swapped every pair, so
    that a change in load from other processes falls on both calls of a pair alike."""
    for _ in range(warmup):
        first()
        second()
    times: tuple[list[float], list[float]] = ([], [])
    for repeat in range(repeats):
        for which in ((0, 1) if repeat % 2 == 0 else (1, 0)):
            fn = first if which == 0 else second
            start = time.perf_counter()
            fn()
            times[which].append(time.perf_counter() - start)
    return times


def _check_equal_to_reference(name: str, block_size: int | None, vectorised, reference) -> None:
    """Same generator seed -> identical ids, noise mask and p_mask values."""
    ours = vectorised(torch.Generator().manual_seed(123))
    theirs = reference(torch.Generator().manual_seed(123))
    for label, a, b in zip(("noisy_input_ids", "noise_mask", "p_mask"), ours, theirs):
        if a.dtype != b.dtype or not torch.equal(a, b):
            raise AssertionError(f"{name} block_size={block_size}: {label} differs from the reference")


def bench_corruption(batch: int, seq_len: int, repeats: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, VOCAB_SIZE, (batch, seq_len), generator=g)
    loss_mask = torch.ones(batch, seq_len, dtype=torch.bool)
    loss_mask[:, : seq_len // 4] = False  # a prompt
    loss_mask &= torch.rand(batch, seq_len, generator=g) < 0.95  # and a few holes

    # (name, block_size, xdllm call, reference call, loop call, kernel, kwargs); each call takes a generator.
    cases = [("corrupt_uniform", None, lambda gen: corrupt_uniform(ids, loss_mask, MASK_ID, generator=gen),
              lambda gen: reference_uniform(ids, loss_mask, gen), lambda gen: loop_uniform(ids, loss_mask, gen),
              corrupt_uniform, {"mask_token_id": MASK_ID})]
    for block_size in (None, 256, 32):
        cases.append((
            "corrupt_blockwise", block_size,
            lambda gen, bs=block_size: corrupt_blockwise(ids, loss_mask, MASK_ID, block_size=bs, generator=gen),
            lambda gen, bs=block_size: reference_blockwise(ids, loss_mask, gen, bs),
            lambda gen, bs=block_size: loop_blockwise(ids, loss_mask, gen, bs),
            corrupt_blockwise, {"mask_token_id": MASK_ID, "block_size": block_size},
        ))
        cases.append((
            "corrupt_uniform_random", block_size,
            lambda gen, bs=block_size: corrupt_uniform_random(ids, loss_mask, VOCAB_SIZE, block_size=bs, generator=gen),
            lambda gen, bs=block_size: reference_uniform_random(ids, loss_mask, gen, bs),
            lambda gen, bs=block_size: loop_uniform_random(ids, loss_mask, gen, bs),
            corrupt_uniform_random, {"vocab_size": VOCAB_SIZE, "block_size": block_size},
        ))

    rows = []
    sample_indices = list(range(batch))
    for name, block_size, vectorised, reference, loop, kernel, kwargs in cases:
        _check_equal_to_reference(name, block_size, vectorised, reference)
        gen, ref_gen = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
        times_vec, times_ref = _paired_seconds(lambda: vectorised(gen), lambda: reference(ref_gen), repeats)
        t_vec, t_ref = statistics.median(times_vec), statistics.median(times_ref)
        pair_ratio = statistics.median(r / v for v, r in zip(times_vec, times_ref))
        slow_repeats = max(1, min(repeats, 9) // 3)
        t_loop = _median_seconds(lambda: loop(gen), slow_repeats)
        t_per_sample = _median_seconds(
            lambda: corrupt_per_sample(kernel, ids, loss_mask, base_seed=0, global_step=0,
                                       sample_indices=sample_indices, **kwargs),
            slow_repeats,
        )
        rows.append({
            "kernel": name, "block_size": block_size, "batch": batch, "seq_len": seq_len,
            "vectorised_ms": 1e3 * t_vec, "reference_ms": 1e3 * t_ref, "reference_over_xdllm": pair_ratio,
            "loop_ms": 1e3 * t_loop, "per_sample_ms": 1e3 * t_per_sample,
            "vectorised_mtok_s": batch * seq_len / t_vec / 1e6, "speedup_vs_loop": t_loop / t_vec,
        })
    return rows


def print_corruption_table(rows: list[dict], repeats: int) -> None:
    print(f"\nCorruption kernels, B={rows[0]['batch']}, L={rows[0]['seq_len']}, torch threads="
          f"{torch.get_num_threads()}: median wall time per call; xdllm and reference outputs checked equal, "
          f"then called back to back {repeats} times; ref/xdllm = median over those pairs of "
          f"reference time / xdllm time (>= 1: xdllm at least as fast)")
    header = (f"{'kernel':<24}{'block':>7}{'xdllm ms':>10}{'ref. ms':>9}{'ref/xdllm':>11}{'Mtok/s':>9}"
              f"{'loop ms':>10}{'vs loop':>9}{'per-sample ms':>15}")
    print(header)
    print("-" * len(header))
    for r in rows:
        block = "seq" if r["block_size"] is None else str(r["block_size"])
        print(f"{r['kernel']:<24}{block:>7}{r['vectorised_ms']:>10.2f}{r['reference_ms']:>9.2f}"
              f"{r['reference_over_xdllm']:>10.2f}x{r['vectorised_mtok_s']:>9.1f}"
              f"{r['loop_ms']:>10.1f}{r['speedup_vs_loop']:>8.1f}x{r['per_sample_ms']:>15.2f}")


def reference_ratios(rows: list[dict]) -> dict[str, float]:
    """``{"kernel/block": reference time / xdllm time}``, block "seq" for one level per sequence."""
    return {f"{r['kernel']}/{'seq' if r['block_size'] is None else r['block_size']}": r["reference_over_xdllm"]
            for r in rows}


# --------------------------------------------------------------------------- part 2


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_resident_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _run_loss_path(loss_fn, path, hidden, weight, targets, block_mask, block_size):
    """Forward + backward of one path; returns the output, forward seconds and total seconds."""
    start = time.perf_counter()
    if path == "fused":
        out = loss_fn.forward_fused(hidden, weight, targets, block_mask, block_size=block_size)
    else:
        logits = hidden @ weight.T
        out = loss_fn(logits, targets, block_mask, block_size=block_size)
    forward_s = time.perf_counter() - start
    out.total_loss.backward()
    return out, forward_s, time.perf_counter() - start


def run_loss_worker(path: str, chunk_size: int, vocab: int, seq_len: int, dim: int, block_size: int,
                    out_file: str) -> None:
    """One forward + backward of one DFlash path in this (fresh) process; results to ``out_file``."""
    from xdllm.losses import DFlashDecayLoss

    g = torch.Generator().manual_seed(0)
    hidden = (torch.randn(1, seq_len, dim, generator=g) / math.sqrt(dim)).requires_grad_()
    weight = torch.randn(vocab, dim, generator=g).requires_grad_()
    targets = torch.randint(0, vocab, (1, seq_len), generator=g)
    block_mask = torch.rand(1, seq_len, generator=g) < 0.9
    loss_fn = DFlashDecayLoss(loss_gamma=7.0, chunk_size=chunk_size)
    _run_loss_path(loss_fn, path, hidden[:, :32].detach().requires_grad_(), weight[:64].detach().requires_grad_(),
                   targets[:, :32] % 64, block_mask[:, :32], block_size)  # one-time lazy init, off the clock

    resident_before = _resident_bytes()
    out, forward_s, total_s = _run_loss_path(loss_fn, path, hidden, weight, targets, block_mask, block_size)
    peak_above_start = _peak_resident_bytes() - resident_before

    torch.save({
        "loss": float(out.total_loss.detach()), "forward_s": forward_s, "forward_backward_s": total_s,
        "peak_mib": peak_above_start / 2**20,
        "correct_per_pos": out.draft_correct_per_pos, "count_per_pos": out.draft_count_per_pos,
        "grad_hidden": hidden.grad, "grad_weight": weight.grad,
    }, out_file)


# (label, path, chunk_size): the materialised reference first, then the fused path at three chunk sizes.
LOSS_RUNS = [("materialised", "materialised", 1024), ("fused c=1024", "fused", 1024),
             ("fused c=512", "fused", 512), ("fused c=256", "fused", 256)]


def bench_dflash(vocab: int, seq_len: int, dim: int, block_size: int) -> dict:
    """Each run in a fresh subprocess; every fused run is compared with the materialised one."""
    runs = []
    with tempfile.TemporaryDirectory() as out_dir:
        for label, path, chunk_size in LOSS_RUNS:
            out_file = str(Path(out_dir) / f"{path}_{chunk_size}.pt")
            subprocess.run(
                [sys.executable, __file__, "--loss-worker", path, "--chunk-size", str(chunk_size),
                 "--vocab", str(vocab), "--seq-len", str(seq_len), "--dim", str(dim),
                 "--block-size", str(block_size), "--out-file", out_file],
                check=True,
            )
            result = torch.load(out_file, mmap=True)
            if not runs:
                reference = result
            runs.append({
                "label": label, "path": path, "chunk_size": chunk_size,
                **{key: result[key] for key in ("loss", "forward_s", "forward_backward_s", "peak_mib")},
                "loss_abs_diff": abs(result["loss"] - reference["loss"]),
                "grad_hidden_max_abs_diff": float((result["grad_hidden"] - reference["grad_hidden"]).abs().max()),
                "grad_weight_max_abs_diff": float((result["grad_weight"] - reference["grad_weight"]).abs().max()),
                "counts_equal": torch.equal(result["correct_per_pos"], reference["correct_per_pos"])
                and torch.equal(result["count_per_pos"], reference["count_per_pos"]),
                "peak_vs_materialised": result["peak_mib"] / reference["peak_mib"],
            })
    return {"vocab": vocab, "seq_len": seq_len, "dim": dim, "block_size": block_size, "batch": 1, "runs": runs}


def print_dflash_table(result: dict) -> None:
    print(f"\nDFlashDecayLoss forward + backward, B=1, T={result['seq_len']}, D={result['dim']}, "
          f"V={result['vocab']}, block_size={result['block_size']}, float32 CPU, "
          f"torch threads={torch.get_num_threads()}; peak = max RSS during the call minus RSS before it")
    header = (f"{'path':<14}{'peak MiB':>10}{'vs mat.':>9}{'forward s':>11}{'fwd+bwd s':>11}{'loss':>11}"
              f"{'|dloss|':>10}{'max|dgrad_h|':>14}{'max|dgrad_W|':>14}{'counts':>8}")
    print(header)
    print("-" * len(header))
    for r in result["runs"]:
        print(f"{r['label']:<14}{r['peak_mib']:>10.0f}{r['peak_vs_materialised']:>9.2f}{r['forward_s']:>11.2f}"
              f"{r['forward_backward_s']:>11.2f}{r['loss']:>11.6f}{r['loss_abs_diff']:>10.1e}"
              f"{r['grad_hidden_max_abs_diff']:>14.1e}{r['grad_weight_max_abs_diff']:>14.1e}"
              f"{'equal' if r['counts_equal'] else 'DIFFER':>8}")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes for a smoke run")
    parser.add_argument("--threads", type=int, default=2, help="torch threads for the corruption part (default 2)")
    parser.add_argument("--repeats", type=int,
                        help="back-to-back pairs of calls of each xdllm kernel and its reference "
                             "(default 101; 5 with --quick)")
    parser.add_argument("--skip-loss", action="store_true", help="only the corruption kernels")
    parser.add_argument("--loss-worker", choices=["materialised", "fused"], help=argparse.SUPPRESS)
    parser.add_argument("--vocab", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seq-len", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dim", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--chunk-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--block-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loss_worker:
        run_loss_worker(args.loss_worker, args.chunk_size, args.vocab, args.seq_len, args.dim, args.block_size,
                        args.out_file)
        return

    if args.quick:
        batch, seq_len, repeats = 8, 512, 5
        vocab, loss_len, dim = 16384, 4096, 128
    else:
        batch, seq_len, repeats = 64, 2048, 101
        vocab, loss_len, dim = 131072, 4096, 1024
    repeats = args.repeats or repeats
    loss_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    corruption = bench_corruption(batch, seq_len, repeats)
    print_corruption_table(corruption, repeats)
    torch.set_num_threads(loss_threads)
    ratios = reference_ratios(corruption)
    summary = {"corruption": corruption, "reference_over_xdllm": ratios,
               "min_reference_over_xdllm": min(ratios.values()), "corruption_threads": args.threads,
               "loss_threads": loss_threads, "quick": args.quick}
    if not args.skip_loss:
        dflash = bench_dflash(vocab, loss_len, dim, block_size=17)  # 16 predicted positions per block
        print_dflash_table(dflash)
        summary["dflash"] = dflash
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
