"""Forward cost per generated token of BD3-LM decoding, with and without the KV cache.

For each generated length (256 and 1024 tokens after a ``[bos]`` prompt) and block size (4 and
16), :class:`~xdllm_models.bd3lm.predictor.BD3LMPredictor` generates the same tokens twice
(one token per step, ``steps_per_block = block_size``, no EOS stop):

- ``cached``: the prompt and every finished block are encoded once into the network's KV cache;
  a step runs the network on the current block only;
- ``recomputed``: every step runs the network over the whole prefix and the current block.

It reports, per generated token, the wall time and the process CPU time (ms; on a shared
machine the CPU time of a one-thread run is the steadier measure of the work done) and the tokens
the network was run on, and the ratios recomputed / cached; the two runs' tokens are checked to be identical. The
network is randomly initialised (d_model 256, 4 layers, 4 heads, vocabulary 4096, positions up
to 1040): the cost of a forward pass does not depend on the weights. Prints one JSON line.

Usage: ``python scripts/bench_block_decoding.py [--device cuda] [--threads N] [--lengths 256 1024]
[--block-sizes 4 16] [--batch-size 1]``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import torch

from xdllm.nn.factory import rotary_transformer
from xdllm_models.bd3lm.predictor import BD3LMPredictor

NETWORK = {"d_model": 256, "n_layers": 4, "n_heads": 4, "vocab_size": 4096, "max_positions": 1040}


class NumberTokenizer:
    """Ids 0-3 are pad / mask / bos / eos; every id decodes to its number."""

    pad_token_id, mask_token_id, bos_token_id, eos_token_id = 0, 1, 2, 3
    vocab_size = NETWORK["vocab_size"]
    special_token_ids = frozenset(range(4))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return " ".join(str(i) for i in ids if not (skip_special_tokens and i in self.special_token_ids))


def _generate(model, tokenizer, batch, length: int, block_size: int, use_cache: bool, device: str):
    fed = []
    handle = model.register_forward_pre_hook(lambda module, args, kwargs: fed.append(args[0].numel()),
                                             with_kwargs=True)
    predictor = BD3LMPredictor(length, block_size, tokenizer=tokenizer, stop_at_eos=False, use_cache=use_cache)
    if device == "cuda":
        torch.cuda.synchronize()
    start, start_cpu = time.perf_counter(), time.process_time()
    prediction = predictor.predict(batch, model=model)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
    handle.remove()
    return prediction["ids"], seconds, cpu_seconds, sum(fed)


def measure(model, tokenizer, length: int, block_size: int, batch_size: int, device: str) -> dict:
    batch = {"input_ids": torch.full((batch_size, 1), tokenizer.bos_token_id, device=device),
             "attention_mask": torch.ones((batch_size, 1), dtype=torch.bool, device=device),
             "sample_index": torch.arange(batch_size, device=device)}
    generated = length * batch_size
    result = {"length": length, "block_size": block_size}
    ids = {}
    for name, use_cache in (("cached", True), ("recomputed", False)):
        ids[name], seconds, cpu_seconds, fed = _generate(model, tokenizer, batch, length, block_size, use_cache,
                                                         device)
        result[f"{name}_ms_per_token"] = round(1000 * seconds / generated, 4)
        result[f"{name}_cpu_ms_per_token"] = round(1000 * cpu_seconds / generated, 4)
        result[f"{name}_tokens_run_per_token"] = round(fed / generated, 2)
    if not torch.equal(ids["cached"], ids["recomputed"]):
        raise RuntimeError(f"length {length}, block {block_size}: cached and recomputed tokens differ")
    result["time_ratio"] = round(result["recomputed_ms_per_token"] / result["cached_ms_per_token"], 2)
    result["cpu_time_ratio"] = round(result["recomputed_cpu_ms_per_token"] / result["cached_cpu_ms_per_token"], 2)
    result["tokens_run_ratio"] = round(result["recomputed_tokens_run_per_token"]
                                       / result["cached_tokens_run_per_token"], 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--batch-size", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tokenizer = NumberTokenizer()
    model = rotary_transformer(**{**NETWORK, "attn_backend": "sdpa"}).to(args.device).eval()
    measure(model, tokenizer, 32, 4, args.batch_size, args.device)  # warm-up
    results = [measure(model, tokenizer, length, block_size, args.batch_size, args.device)
               for length in args.lengths for block_size in args.block_sizes]
    device = torch.cuda.get_device_name() if args.device == "cuda" else f"cpu, {args.threads} thread(s)"
    print(json.dumps({"bench": "block_decoding", "device": device, "torch": torch.__version__,
                      "batch_size": args.batch_size, "network": NETWORK, "results": results}))


if __name__ == "__main__":
    main()
