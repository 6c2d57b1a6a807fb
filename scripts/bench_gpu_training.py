"""Training throughput of the MLM network on one GPU: packed FlexAttention against its ideal and
against padded SDPA, with model FLOP utilisation, peak memory and compilations.

For each configuration (``125m``: d_model 768, 12 layers; ``550m``: d_model 1536, 16 layers;
vocabulary 32768, rows of 2048 tokens, 8 rows per step) and each layout:

- ``packed_flex``: documents packed into fixed rows (``PackedMLMCollator``, ``segment_ids``),
  attention kept inside each document by a FlexAttention block mask;
- ``nomask``: the same rows and tokens with no mask at all (full attention, same backend): the
  ideal the packed layout is held to;
- ``padded_sdpa``: the same documents one per row, padded to the batch's longest (rounded up to
  64), SDPA with the padding mask.

A step is forward, ``MLMLoss`` (the chunked path on supervised positions by default), backward and
a fused AdamW step, under bf16 autocast on CUDA; ``--compile`` compiles the block
(``model.compile``: one graph every block runs). Document lengths are log-normal with mean ``row_length / 4`` (as in
``bench_packing.py``). ``real_tokens_per_s`` counts tokens of documents; ``mfu`` is
``6 * N * slots_per_s / peak`` with ``N`` the parameters except the input embedding (the LM head
included, attention scores not counted) and ``slots`` every position computed, padding included.
``peak_memory_gib`` is ``torch.cuda.max_memory_allocated`` (null on the CPU); ``compilations``
counts the graphs dynamo compiled during the layout (flex attention, the compiled block);
``warmup_seconds`` is the untimed steps' time, compilation included (one warm-up step per shape
bucket of the timed batches: padded batches have several).

    python scripts/bench_gpu_training.py                       # both configurations, CUDA
    python scripts/bench_gpu_training.py --configs 125m --compile --layouts packed_flex nomask
    python scripts/bench_gpu_training.py --configs 125m --layouts packed_flex --profile 3  # where the time goes
    python scripts/bench_gpu_training.py --smoke --device cpu  # a tiny configuration, seconds
    python scripts/bench_gpu_training.py --loss-memory         # CPU peak memory, plain vs chunked loss

Prints one JSON line; each layout's figures also go to stderr, one JSON line as it finishes.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence

import torch
from torch._dynamo.utils import counters

from xdllm.data.benchmark_lengths import long_tailed_lengths
from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.interfaces import Example
from xdllm.nn.buckets import bucket_shape
from xdllm.train.kernel_profile import profile_steps
from xdllm.train.optim import uses_fused_adamw
from xdllm_models.mlm.collator import MLMSeq2SeqTrainCollator
from xdllm_models.mlm.loss import MLMLoss
from xdllm_models.mlm.model import RotaryTransformerMLMModel
from xdllm_models.mlm.packed_collator import PackedMLMCollator

CONFIGS = {
    "125m": dict(d_model=768, n_layers=12, n_heads=12, vocab=32768, row_length=2048, batch_rows=8),
    "550m": dict(d_model=1536, n_layers=16, n_heads=12, vocab=32768, row_length=2048, batch_rows=8),
    "smoke": dict(d_model=32, n_layers=1, n_heads=2, vocab=64, row_length=64, batch_rows=2),
}
LAYOUTS = ("packed_flex", "nomask", "padded_sdpa")
H100_BF16_TFLOPS = 989.0
PAD_MULTIPLE = 64


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--configs", nargs="+", default=["125m", "550m"], choices=sorted(CONFIGS))
    parser.add_argument("--smoke", action="store_true", help="the tiny configuration, 2 timed steps (tests)")
    parser.add_argument("--steps", type=int, default=20, help="timed packed steps per layout")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens there)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the network (model.compile)")
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS,
                        help="the layouts to run (default all; padded batches compile once per width bucket)")
    parser.add_argument("--profile", type=int, default=0, metavar="STEPS",
                        help="after timing, profile this many more steps per layout: the share of each kind of "
                             "kernel (matmul, attention, loss, norm, casts, elementwise, optimizer) and the top ones")
    parser.add_argument("--loss", default="chunked", choices=["chunked", "plain"])
    parser.add_argument("--precision", default=None, choices=["bf16", "fp32"],
                        help="autocast dtype (default: bf16 on CUDA, fp32 on the CPU)")
    parser.add_argument("--peak-tflops", type=float, default=H100_BF16_TFLOPS,
                        help="the device's dense peak for the MFU (H100 SXM bf16: 989)")
    parser.add_argument("--loss-memory", action="store_true",
                        help="instead: CPU peak memory of the plain and the chunked loss")
    parser.add_argument("--loss-memory-child", choices=["plain", "chunked"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.smoke:
        args.configs, args.steps, args.warmup = ["smoke"], 2, 1
    return args


def make_documents(config: dict, rows: int, seed: int) -> list[Example]:
    """Documents whose tokens fill about ``rows`` packed rows."""
    count = max(4, int(rows * 4 * 1.02))
    lengths = long_tailed_lengths(count, config["row_length"], 1.0, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    return [Example(prompt_ids=[], target_ids=torch.randint(4, config["vocab"], (length - 2,),
                                                            generator=generator).tolist(),
                    sample_index=index, step=0) for index, length in enumerate(lengths)]


def packed_steps(config: dict, documents: list[Example], tokenizer: SymbolTokenizer
                 ) -> list[tuple[list[Example], dict]]:
    """Consecutive groups of documents, each packed into exactly ``batch_rows`` rows: one shape."""
    capacity = config["batch_rows"] * config["row_length"]
    steps, start = [], 0
    while start < len(documents):
        end, tokens = start, 0
        while end < len(documents) and tokens + len(documents[end]["target_ids"]) + 2 <= capacity:
            tokens += len(documents[end]["target_ids"]) + 2
            end += 1
        while end > start:
            try:
                collator = PackedMLMCollator(tokenizer, config["row_length"], seed=0, num_rows=config["batch_rows"])
                steps.append((documents[start:end], collator(documents[start:end])))
                break
            except ValueError:  # best-fit needs one more row: one document fewer
                end -= 1
        if end == len(documents) or end == start:
            break
        start = end
    return steps[:-1] if len(steps) > 1 else steps  # the last group is a remainder


def layouts(config: dict, documents: list[Example], tokenizer: SymbolTokenizer) -> dict[str, list[dict]]:
    """The batches of every layout: packed and nomask hold the same rows, padded the same
    documents one per row (``batch_rows`` per batch)."""
    steps = packed_steps(config, documents, tokenizer)
    packed = [dict(batch) for _, batch in steps]
    nomask = [{"input_ids": batch["input_ids"], "target_ids": batch["target_ids"]} for batch in packed]
    kept = [document for group, _ in steps for document in group]
    collator = MLMSeq2SeqTrainCollator(tokenizer, seed=0)
    pads = {"input_ids": tokenizer.pad_token_id, "target_ids": tokenizer.pad_token_id,
            "attention_mask": False, "positions": 0}
    padded = []
    for start in range(0, len(kept) - config["batch_rows"] + 1, config["batch_rows"]):  # whole batches
        batch = collator(kept[start:start + config["batch_rows"]])
        extra = -batch["input_ids"].shape[1] % PAD_MULTIPLE
        padded.append({key: torch.nn.functional.pad(batch[key], (0, extra), value=fill)
                       for key, fill in pads.items()})
    return {"packed_flex": packed, "nomask": nomask, "padded_sdpa": padded}


def real_tokens(name: str, batch: dict, tokenizer: SymbolTokenizer) -> int:
    if name == "padded_sdpa":
        return int(batch["attention_mask"].sum())
    return int((batch["input_ids"] != tokenizer.pad_token_id).sum())  # packed rows: padding is pad


def run_layout(name: str, batches: list[dict], config: dict, args: argparse.Namespace, device: torch.device,
               tokenizer: SymbolTokenizer) -> dict:
    """Train ``args.warmup`` untimed steps and one on each shape bucket still to come (so no
    compilation is timed), then time every step after the first ``args.warmup``."""
    flex = "flex" if device.type == "cuda" else "sdpa"  # no FlexAttention backward off CUDA
    torch.manual_seed(args.seed)
    model = RotaryTransformerMLMModel(
        tokenizer.vocab_size, d_model=config["d_model"], n_layers=config["n_layers"], n_heads=config["n_heads"],
        max_positions=config["row_length"], attn_backend="sdpa" if name == "padded_sdpa" else flex,
        compile=args.compile).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=uses_fused_adamw(model, None))
    loss = MLMLoss(tokenizer.mask_token_id, chunk_size=None if args.loss == "plain" else 2048)
    dtype = torch.bfloat16 if args.precision == "bf16" else None
    batches = [{key: value.to(device) for key, value in batch.items()} for batch in batches]
    warmup, timed = batches[:args.warmup], batches[args.warmup:] or batches[-1:]
    first_of_bucket = {bucket_shape(*batch["input_ids"].shape): batch for batch in reversed(timed)}
    warmup += list(first_of_bucket.values())  # every shape compiled before the clock starts

    def step(batch: dict) -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            value = loss(model, batch)["loss"]
        value.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    graphs_before = counters["stats"]["unique_graphs"]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    warmup_started = time.perf_counter()
    for batch in warmup:
        step(batch)
    synchronize(device)
    started = time.perf_counter()
    for batch in timed:
        step(batch)
    synchronize(device)
    seconds = time.perf_counter() - started
    profiled = {"profile": profile_steps(lambda: step(timed[0]), args.profile, device)} if args.profile else {}
    slots = sum(batch["input_ids"].numel() for batch in timed)
    tokens = sum(real_tokens(name, batch, tokenizer) for batch in timed)
    matmul_parameters = sum(p.numel() for p in model.parameters()) - model.transformer.token_embedding.weight.numel()
    return {
        "backend": "sdpa" if name == "padded_sdpa" else flex,
        "steps": len(timed),
        "seconds": seconds,
        "warmup_steps": len(warmup),
        "warmup_seconds": started - warmup_started,
        "real_tokens_per_s": tokens / seconds,
        "utilization": tokens / slots,
        "mfu": 6 * matmul_parameters * slots / seconds / (args.peak_tflops * 1e12),
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "compilations": counters["stats"]["unique_graphs"] - graphs_before,
        **profiled,
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_config(name: str, args: argparse.Namespace, device: torch.device) -> dict:
    config = CONFIGS[name]
    tokenizer = SymbolTokenizer([f"t{index}" for index in range(config["vocab"] - 4)])
    documents = make_documents(config, (args.warmup + args.steps) * config["batch_rows"], args.seed)
    results = {}
    for layout, batches in layouts(config, documents, tokenizer).items():
        if layout not in args.layouts:
            continue
        results[layout] = run_layout(layout, batches, config, args, device, tokenizer)
        # as each layout ends: a run stopped at a time limit still leaves the layouts it finished
        print(json.dumps({"config": name, "layout": layout, **results[layout]}), file=sys.stderr, flush=True)
    torch.manual_seed(args.seed)
    parameters = sum(p.numel() for p in RotaryTransformerMLMModel(
        tokenizer.vocab_size, d_model=config["d_model"], n_layers=config["n_layers"],
        n_heads=config["n_heads"], max_positions=config["row_length"]).parameters())
    ratios = {name: results["packed_flex"]["real_tokens_per_s"] / results[layout]["real_tokens_per_s"]
              for name, layout in (("packed_over_nomask", "nomask"), ("packed_over_padded", "padded_sdpa"))
              if "packed_flex" in results and layout in results}
    return {**config, "parameters": parameters, **results, **ratios}


def loss_memory_child(variant: str) -> None:
    """Peak resident memory added by one loss + backward over 4096 tokens, vocabulary 32768."""
    from xdllm.losses import chunked_token_nll

    tokens, dim, vocab = 4096, 256, 32768
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(tokens, dim, generator=generator, requires_grad=True)
    weight = (torch.randn(vocab, dim, generator=generator) * 0.02).requires_grad_(True)
    targets = torch.randint(0, vocab, (tokens,), generator=generator)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if variant == "plain":
        nll = torch.nn.functional.cross_entropy((hidden @ weight.T).float(), targets, reduction="none")
    else:
        nll = chunked_token_nll(hidden, weight, targets, chunk_size=512)
    nll.mean().backward()
    added = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"variant": variant, "tokens": tokens, "vocab": vocab, "peak_added_mib": added / 1024}))


def loss_memory() -> dict:
    """Each variant in its own process, so each peak is its own."""
    results = {}
    for variant in ("plain", "chunked"):
        out = subprocess.run([sys.executable, __file__, "--loss-memory-child", variant], capture_output=True,
                             text=True, check=True).stdout
        results[variant] = json.loads(out.strip().splitlines()[-1])
    return {"loss_memory": results,
            "float32_logits_mib": results["plain"]["tokens"] * results["plain"]["vocab"] * 4 / 2**20}


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.loss_memory_child:
        torch.set_num_threads(1)
        loss_memory_child(args.loss_memory_child)
        return
    if args.loss_memory:
        print(json.dumps(loss_memory()))
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_gpu_training: --device cuda but torch sees no CUDA device")
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    args.precision = args.precision or ("bf16" if device.type == "cuda" else "fp32")
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "precision": args.precision, "compile": args.compile, "loss": args.loss,
              "peak_tflops": args.peak_tflops}
    report.update({name: bench_config(name, args, device) for name in args.configs})
    print(json.dumps(report))


if __name__ == "__main__":
    main()
