"""Peak memory of one DFlash drafter training step, fused chunked cross-entropy against plain.

One training step of the DFlash family's loss (:class:`~xdllm_models.dflash.loss.DFlashLoss`):
the frozen target's features, the drafter over every block, ``DFlashDecayLoss`` through the
target's LM head, and the backward pass, with ``use_fused_linear_ce`` true (``[chunk_size, V]``
logits at a time) or false (the ``[B, blocks x (block_size - 1), V]`` logits materialised).
The target is a randomly initialised arlm network (the memory of a step does not depend on the
weights) with a vocabulary of ``--vocab`` tokens, written as a checkpoint the drafter reads its
sizes from. Each path runs in a fresh subprocess; its peak is the process's peak resident set
size during the step minus its resident set size before it (CPU; the same measure as
``scripts/bench_kernels.py``). Prints one JSON line.

Usage: ``python scripts/bench_dflash_memory.py [--vocab 32768] [--batch 16] [--seq-len 128]
[--anchors 16] [--block-size 8] [--chunk-size 256] [--d-model 256]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_resident_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def write_target(args: argparse.Namespace, folder: Path) -> Path:
    """A random arlm network of the benchmark's size, saved as an xdllm checkpoint."""
    from xdllm.train.checkpoint_io import save_checkpoint_file
    from xdllm_models.arlm.model import causal_rotary_transformer

    sizes = {"vocab_size": args.vocab, "d_model": args.d_model, "n_layers": 4, "n_heads": 4,
             "max_positions": args.seq_len + args.block_size}
    torch.manual_seed(0)
    model = causal_rotary_transformer(**sizes)
    path = folder / "target.ckpt"
    save_checkpoint_file({"xdllm_config": {"model_family": "arlm", "model": sizes},
                          "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, path)
    return path


def worker(args: argparse.Namespace) -> None:
    """One training step of one path in this fresh process; the result as one JSON line."""
    from xdllm.interfaces import LossContext
    from xdllm.train.checkpoint_io import read_checkpoint_file
    from xdllm_models.arlm.model import causal_rotary_transformer
    from xdllm_models.dflash.loss import DFlashLoss
    from xdllm_models.dflash.model import DFlashDrafter

    checkpoint = read_checkpoint_file(args.target)
    target = causal_rotary_transformer(**checkpoint["xdllm_config"]["model"])
    target.load_state_dict({k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items()})
    target.eval().requires_grad_(False)
    del checkpoint
    torch.manual_seed(0)  # the same drafter in both processes
    drafter = DFlashDrafter(str(args.target), block_size=args.block_size, n_layers=2, n_heads=4).train()
    generator = torch.Generator().manual_seed(0)
    rows, width = args.batch, args.seq_len
    anchors = torch.stack([torch.randperm(width - args.block_size, generator=generator)[:args.anchors].sort().values
                           for _ in range(rows)])
    batch = {"input_ids": torch.randint(4, args.vocab, (rows, width), generator=generator),
             "attention_mask": torch.ones(rows, width, dtype=torch.bool),
             "anchor_positions": anchors, "anchor_valid": torch.ones_like(anchors, dtype=torch.bool)}
    loss = DFlashLoss(mask_token_id=1, block_size=args.block_size, use_fused_linear_ce=args.worker == "fused",
                      chunk_size=args.chunk_size)
    context = LossContext(frozen={"target": target})
    loss(drafter, {k: v[:1] for k, v in batch.items()}, context)["loss"].backward()  # lazy init, off the clock
    drafter.zero_grad(set_to_none=True)
    resident_before = _resident_bytes()
    start = time.perf_counter()
    out = loss(drafter, batch, context)
    out["loss"].backward()
    seconds = time.perf_counter() - start
    peak = _peak_resident_bytes() - resident_before
    print(json.dumps({"loss": float(out["loss"]), "peak_mib": peak / 2**20, "step_s": seconds}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--anchors", type=int, default=16)
    parser.add_argument("--block-size", type=int, default=8)
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--worker", choices=("fused", "plain"), default=None)
    parser.add_argument("--target", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.worker is not None:
        worker(args)
        return
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        target = write_target(args, Path(folder))
        for path in ("plain", "fused"):
            command = [sys.executable, __file__, *sys.argv[1:], "--worker", path, "--target", str(target)]
            lines = subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()
            results[path] = json.loads(lines[-1])
    drafted = args.batch * args.anchors * (args.block_size - 1)
    print(json.dumps({
        "device": "cpu", "vocab": args.vocab, "batch": args.batch, "seq_len": args.seq_len, "anchors": args.anchors,
        "block_size": args.block_size, "chunk_size": args.chunk_size, "drafted_positions": drafted,
        "drafted_logits_mib": drafted * args.vocab * 4 / 2**20,
        "plain_peak_mib": round(results["plain"]["peak_mib"], 1),
        "fused_peak_mib": round(results["fused"]["peak_mib"], 1),
        "fused_vs_plain": round(results["fused"]["peak_mib"] / results["plain"]["peak_mib"], 3),
        "plain_step_s": round(results["plain"]["step_s"], 2), "fused_step_s": round(results["fused"]["step_s"], 2),
        "loss_difference": abs(results["plain"]["loss"] - results["fused"]["loss"]),
    }))


if __name__ == "__main__":
    main()
