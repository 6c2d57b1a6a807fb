"""What ``model.compile=true`` costs to compile and what it buys per step, by network depth.

For each depth and mode (``eager``, ``compiled``), a fresh interpreter with inductor's caches
off (so every compilation is cold) builds a ``RotaryTransformer`` and times training steps
(forward, a loss, backward) on one batch: ``first_step_s`` (for ``compiled``, with compiling
the forward and backward graphs) and ``step_ms`` (the median of
``--steps`` later steps); ``graphs`` is the number of graphs dynamo compiled, ``graph_ops`` the
operations in them (a measure of what inductor has to compile). Prints one JSON line per
run and a last one with ``compile_s`` (compiled first step minus eager first step) and
``compiled_over_eager`` (step time ratio) per depth.

On the CPU the rows are padded batches through SDPA (FlexAttention has no backward there); on
CUDA, packed rows through flex, under bf16 autocast, as training runs.

    python scripts/bench_compile_time.py                     # CPU, depths 2 and 8
    python scripts/bench_compile_time.py --device cuda --layers 12 --d-model 768
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

import torch


def measure(args: argparse.Namespace, n_layers: int, compiled: bool) -> dict:
    """One depth and mode, in this (fresh) process."""
    from torch._dynamo.testing import CompileCounterWithBackend

    from xdllm.nn import RotaryTransformer, RotaryTransformerConfig
    from xdllm.nn import transformer as transformer_module

    device = torch.device(args.device)
    counter = CompileCounterWithBackend(args.backend)
    if compiled:  # the same compilation model.compile makes, counted
        from xdllm.nn.buckets import allow_shape_buckets

        allow_shape_buckets()
        counted = torch.compile(transformer_module._run_block, backend=counter, dynamic=False)
        transformer_module._compiled_block = lambda: counted
    backend = "flex" if device.type == "cuda" else "sdpa"
    torch.manual_seed(0)
    config = RotaryTransformerConfig(vocab_size=args.vocab, d_model=args.d_model, n_layers=n_layers,
                                     n_heads=args.d_model // 64, max_positions=args.seq_len,
                                     attn_backend=backend, compile=compiled)
    model = RotaryTransformer(config).to(device).train()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, args.vocab, (args.rows, args.seq_len), generator=generator).to(device)
    documents = (torch.arange(args.seq_len) // (args.seq_len // 4)).expand(args.rows, -1).to(device)
    inputs = {"segment_ids": documents} if backend == "flex" else {}
    precision = (torch.autocast("cuda", torch.bfloat16) if device.type == "cuda"
                 else contextlib.nullcontext())

    def step() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with precision:
            logits = model(ids, **inputs)
        logits.float().logsumexp(-1).mean().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    first = step()
    steps = [step() for _ in range(args.steps)]
    return {"layers": n_layers, "mode": "compiled" if compiled else "eager", "device": str(device),
            "first_step_s": round(first, 2), "step_ms": round(1000 * statistics.median(steps), 1),
            "graphs": counter.frame_count, "graph_ops": counter.op_count}


def run_fresh(args: argparse.Namespace, n_layers: int, compiled: bool) -> dict:
    """:func:`measure` in a new interpreter, inductor's on-disk caches off."""
    command = [sys.executable, __file__, "--worker", str(n_layers), str(int(compiled)), "--device", args.device,
               "--d-model", str(args.d_model), "--vocab", str(args.vocab), "--rows", str(args.rows),
               "--seq-len", str(args.seq_len), "--steps", str(args.steps), "--backend", args.backend]
    if args.threads is not None:
        command += ["--threads", str(args.threads)]
    env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{n_layers} layers, compiled={compiled} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--backend", default="inductor", choices=("inductor", "aot_eager"),
                        help="what compiles the graphs: inductor (what model.compile uses; the figures) or "
                             "aot_eager (traces forward and backward and runs them eagerly: the graph counts in "
                             "seconds, for a test of this script)")
    parser.add_argument("--worker", nargs=2, type=int, metavar=("LAYERS", "COMPILED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(measure(args, args.worker[0], bool(args.worker[1]))))
        return
    summary = {}
    for n_layers in args.layers:
        eager, compiled = run_fresh(args, n_layers, False), run_fresh(args, n_layers, True)
        print(json.dumps(eager), flush=True)
        print(json.dumps(compiled), flush=True)
        summary[n_layers] = {"compile_s": round(compiled["first_step_s"] - eager["first_step_s"], 1),
                             "compiled_over_eager": round(compiled["step_ms"] / eager["step_ms"], 3)}
    print(json.dumps({"summary": summary, "backend": args.backend, "d_model": args.d_model, "seq_len": args.seq_len,
                      "rows": args.rows, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
