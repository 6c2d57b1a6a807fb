"""Training throughput, packed rows vs one document per padded row, in real tokens per second.

Same model, same documents, same noise (both collators derive it per sample from the seed):

- packed: ``PackedMLMCollator`` packs every document into rows of ``--row-length`` (best-fit
  decreasing), split into batches of ``--batch-rows`` rows;
- padded: ``MLMSeq2SeqTrainCollator``, ``--batch-rows`` documents per batch, each padded to
  the batch's longest document (rounded up to ``--pad-multiple``).

Document lengths (bos + tokens + eos) are log-normal (``sigma = --sigma``), clipped to
``[8, row_length]`` (so the padded baseline never has to split a document), with the location
chosen so that the mean after clipping is ``--row-length / 4``. A training step
is forward, ``MLMLoss``, backward and an AdamW step; collation is done before timing. Each
layout is timed ``--repeats`` times, alternating, and its fastest pass counts (robust to other
load on the machine). On CPU
the attention backend is SDPA; with ``--device cuda`` it is FlexAttention (``auto``).

    python scripts/bench_packing.py                # CPU
    python scripts/bench_packing.py --device cuda  # GPU, FlexAttention

Prints a table, then one JSON line with the numbers.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence

import torch

from xdllm.data.benchmark_lengths import long_tailed_lengths
from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.interfaces import Example
from xdllm_models.mlm.collator import MLMSeq2SeqTrainCollator
from xdllm_models.mlm.loss import MLMLoss
from xdllm_models.mlm.model import RotaryTransformerMLMModel
from xdllm_models.mlm.packed_collator import PackedMLMCollator


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--row-length", type=int, default=256)
    parser.add_argument("--documents", type=int, default=192)
    parser.add_argument("--batch-rows", type=int, default=8)
    parser.add_argument("--sigma", type=float, default=1.0, help="log-normal shape of document lengths")
    parser.add_argument("--pad-multiple", type=int, default=None,
                        help="round padded widths up to this (default 1 on cpu, 64 on cuda: few shapes to compile)")
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed passes per layout, alternating layouts; the fastest counts")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def make_examples(lengths: Sequence[int], vocab: int, seed: int) -> list[Example]:
    generator = torch.Generator().manual_seed(seed + 1)
    return [Example(prompt_ids=[], target_ids=torch.randint(4, vocab, (length - 2,), generator=generator).tolist(),
                    sample_index=index, step=0) for index, length in enumerate(lengths)]


def packed_batches(examples: list[Example], tokenizer: SymbolTokenizer, row_length: int, batch_rows: int) -> list[dict]:
    rows = PackedMLMCollator(tokenizer, row_length, seed=0)(examples)
    return [{key: value[start:start + batch_rows] for key, value in rows.items()}
            for start in range(0, rows["input_ids"].shape[0], batch_rows)]


def padded_batches(examples: list[Example], tokenizer: SymbolTokenizer, batch_rows: int,
                   pad_multiple: int) -> list[dict]:
    collator = MLMSeq2SeqTrainCollator(tokenizer, seed=0)
    batches = []
    for start in range(0, len(examples), batch_rows):
        batch = collator(examples[start:start + batch_rows])
        extra = -batch["input_ids"].shape[1] % pad_multiple
        if extra:
            pads = {"input_ids": tokenizer.pad_token_id, "target_ids": tokenizer.pad_token_id,
                    "attention_mask": False, "positions": 0}
            batch = {key: torch.nn.functional.pad(value, (0, extra), value=pads[key]) if key in pads else value
                     for key, value in batch.items()}
        batches.append({key: batch[key] for key in ("input_ids", "target_ids", "attention_mask", "positions")})
    return batches


def train_throughput(batches: list[dict], make_model: Callable[[], torch.nn.Module], loss: MLMLoss,
                     device: torch.device, warmup_steps: int) -> float:
    """Seconds to train one pass over ``batches`` (after ``warmup_steps`` untimed steps)."""
    model = make_model().to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [{key: value.to(device) for key, value in batch.items()} for batch in batches]

    def step(batch: dict) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss(model, batch)["loss"].backward()
        optimizer.step()

    for batch in batches[:warmup_steps]:
        step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for batch in batches:
        step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_packing: --device cuda but CUDA is not available")
    pad_multiple = args.pad_multiple or (64 if device.type == "cuda" else 1)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    tokenizer = SymbolTokenizer([f"t{index}" for index in range(args.vocab - 4)])
    lengths = long_tailed_lengths(args.documents, args.row_length, args.sigma, args.seed)
    examples = make_examples(lengths, tokenizer.vocab_size, args.seed)
    real_tokens = sum(lengths)

    def make_model() -> torch.nn.Module:
        torch.manual_seed(args.seed)
        return RotaryTransformerMLMModel(tokenizer.vocab_size, d_model=args.d_model, n_layers=args.layers,
                                         n_heads=args.heads, max_positions=args.row_length)

    loss = MLMLoss(tokenizer.mask_token_id)
    runs = {"packed": packed_batches(examples, tokenizer, args.row_length, args.batch_rows),
            "padded": padded_batches(examples, tokenizer, args.batch_rows, pad_multiple)}
    seconds_per_pass = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, batches in runs.items():
            seconds_per_pass[name].append(train_throughput(batches, make_model, loss, device, args.warmup_steps))
    results = {}
    for name, batches in runs.items():
        seconds = min(seconds_per_pass[name])
        slots = sum(batch["input_ids"].numel() for batch in batches)
        results[name] = {"steps": len(batches), "rows": sum(batch["input_ids"].shape[0] for batch in batches),
                         "slots": slots, "utilization": real_tokens / slots, "seconds": seconds,
                         "real_tokens_per_s": real_tokens / seconds}
    backend = make_model().transformer.attention_backend(device)

    print(f"device={device.type} backend={backend} threads={torch.get_num_threads()} "
          f"row_length={args.row_length} documents={args.documents} "
          f"mean_length={real_tokens / len(lengths):.1f} max_length={max(lengths)} real_tokens={real_tokens}")
    print(f"{'layout':<8} {'steps':>6} {'rows':>6} {'slots':>8} {'util':>6} {'seconds':>8} {'real tok/s':>11}")
    for name, result in results.items():
        print(f"{name:<8} {result['steps']:>6} {result['rows']:>6} {result['slots']:>8} "
              f"{result['utilization']:>6.2f} {result['seconds']:>8.2f} {result['real_tokens_per_s']:>11.0f}")
    speedup = results["packed"]["real_tokens_per_s"] / results["padded"]["real_tokens_per_s"]
    print(f"packed / padded real tokens per second: {speedup:.2f}x")
    print(json.dumps({"device": device.type, "backend": backend, "threads": torch.get_num_threads(),
                      "row_length": args.row_length,
                      "documents": args.documents, "mean_length": real_tokens / len(lengths),
                      "packed": results["packed"], "padded": results["padded"], "speedup": speedup}))


if __name__ == "__main__":
    main()
