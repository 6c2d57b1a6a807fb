"""Building FlexAttention's BlockMask for packed rows: ``create_block_mask`` against the dense
mask reduced block by block (``xdllm.nn.block_masks``, what ``MaskRule.block_mask`` now does
where the lengths are whole blocks of 128), for a document mask and a causal one.

Rows are packed with documents of log-normal lengths (mean a quarter of the row, as in
``bench_gpu_training.py``). Prints, per shape and rule, the median milliseconds of each way over
``--repeats`` builds (after one untimed build) and their ratio, as one JSON line; the two masks
are checked to be the same first.

    python scripts/bench_block_mask.py                  # CPU
    python scripts/bench_block_mask.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from xdllm.data.benchmark_lengths import long_tailed_lengths
from xdllm.nn.block_masks import block_mask_from_dense
from xdllm.nn.masks import CausalMask, DocumentMask, Tokens

SHAPES = ((8, 2048), (64, 256))  # bench_gpu_training's rows; many short rows


def packed_tokens(rows: int, length: int, device: torch.device, seed: int) -> Tokens:
    """Document ids and positions of ``rows`` rows filled with whole documents (the last cut)."""
    lengths = iter(long_tailed_lengths(rows * length, length, 1.0, seed))
    documents = torch.empty(rows, length, dtype=torch.long)
    positions = torch.empty(rows, length, dtype=torch.long)
    for row in range(rows):
        start, document = 0, 0
        while start < length:
            size = min(next(lengths), length - start)
            documents[row, start:start + size] = document
            positions[row, start:start + size] = torch.arange(size)
            start, document = start + size, document + 1
    return Tokens(documents.to(device), positions.to(device))


def check_same(created: BlockMask, reduced: BlockMask, where: str) -> None:
    """Refuse to time two builds that do not give the same mask (which blocks are kept, and
    which of them are full)."""
    if not (torch.equal(created.to_dense(), reduced.to_dense())
            and torch.equal(created.full_kv_num_blocks, reduced.full_kv_num_blocks)):
        raise SystemExit(f"{where}: the mask reduced from the dense one differs from create_block_mask's")


def median_ms(build, repeats: int, device: torch.device) -> float:
    build()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        build()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    device = torch.device(args.device)
    results = []
    for rows, length in SHAPES:
        tokens = packed_tokens(rows, length, device, args.seed)
        for rule in (DocumentMask(), CausalMask()):
            mask_mod = rule.mask_mod(tokens, tokens)

            def create() -> BlockMask:
                return create_block_mask(mask_mod, B=rows, H=None, Q_LEN=length, KV_LEN=length, device=device)

            def reduce() -> BlockMask:
                return block_mask_from_dense(rule.dense(tokens, tokens), mask_mod)

            check_same(create(), reduce(), f"{rows}x{length} {type(rule).__name__}")
            created, reduced = median_ms(create, args.repeats, device), median_ms(reduce, args.repeats, device)
            results.append({"rows": rows, "length": length, "rule": type(rule).__name__,
                            "create_block_mask_ms": created, "from_dense_ms": reduced,
                            "speedup": created / reduced})
    print(json.dumps({"benchmark": "block_mask", "device": str(device), "torch": torch.__version__,
                      "threads": torch.get_num_threads(), "results": results}))


if __name__ == "__main__":
    main()
