"""Forward cost per generated token of block-wise decoding on a KV cache (bd3lm, udlm, hybrid).

For each generated length (256 and 1024 tokens after a ``[bos]`` prompt) and block size (4 and
16), the family's predictor generates one token per step (``--family``, default ``bd3lm``):

- ``bd3lm`` (:class:`~xdllm_models.bd3lm.predictor.BD3LMPredictor`, ``steps_per_block =
  block_size``, no EOS stop) twice, with the same tokens:

  - ``cached``: the prompt and every finished block are encoded once into the network's KV
    cache; a step runs the network on the current block only;
  - ``recomputed``: every step runs the network over the whole prefix and the current block;

- ``udlm`` (:class:`~xdllm_models.udlm.predictor.UDLMPredictor`, ``block_size`` steps per block,
  ``stop_when_unchanged=False``) and ``hybrid``
  (:class:`~xdllm_models.hybrid.predictor.HybridPredictor`, ``threshold=None``: the seed, then
  one token per fill pass) decode on their cache only (they have no recomputing mode), so they
  report ``cached`` alone; every denoising pass reads the cache without extending it.

It reports, per generated token, the wall time and the process CPU time (ms; on a shared
machine the CPU time of a one-thread run is the steadier measure of the work done) and the tokens
the network was run on, and for bd3lm the ratios recomputed / cached. To compare two versions of
the code (a change in the cache, say), run the same command in a checkout of each. The network
is randomly initialised (d_model 256, 4 layers, 4 heads, vocabulary 4096, positions up to 1040):
the cost of a forward pass does not depend on the weights. Prints one JSON line.

Usage: ``python scripts/bench_block_decoding.py [--family bd3lm|udlm|hybrid] [--device cuda]
[--threads N] [--lengths 256 1024] [--block-sizes 4 16] [--batch-size 1]``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

from xdllm.nn.factory import rotary_transformer
from xdllm_models.bd3lm.predictor import BD3LMPredictor
from xdllm_models.hybrid.model import hybrid_rotary_transformer
from xdllm_models.hybrid.predictor import HybridPredictor
from xdllm_models.udlm.model import udlm_transformer
from xdllm_models.udlm.predictor import UDLMPredictor

NETWORK = {"d_model": 256, "n_layers": 4, "n_heads": 4, "vocab_size": 4096, "max_positions": 1040}


class NumberTokenizer:
    """Ids 0-3 are pad / mask / bos / eos; every id is written as its number."""

    pad_token_id, mask_token_id, bos_token_id, eos_token_id = 0, 1, 2, 3
    vocab_size = NETWORK["vocab_size"]
    special_token_ids = frozenset(range(4))

    def encode(self, text: str) -> list[int]:
        return [int(token) for token in text.split()]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return " ".join(str(i) for i in ids if not (skip_special_tokens and i in self.special_token_ids))

    def id_to_token(self, token_id: int) -> str:
        return str(token_id)


class Family(NamedTuple):
    """A family's network factory and its predictor for ``(length, block_size, tokenizer, mode)``."""

    network: Callable[..., torch.nn.Module]
    predictor: Callable[[int, int, NumberTokenizer, str], object]
    modes: tuple[str, ...]


FAMILIES = {
    "bd3lm": Family(rotary_transformer,
                    lambda length, block, tok, mode: BD3LMPredictor(length, block, tokenizer=tok, stop_at_eos=False,
                                                                    use_cache=mode == "cached"),
                    ("cached", "recomputed")),
    "udlm": Family(udlm_transformer,
                   lambda length, block, tok, mode: UDLMPredictor(length, block, tokenizer=tok,
                                                                  stop_when_unchanged=False, stop_at_eos=False),
                   ("cached",)),
    "hybrid": Family(hybrid_rotary_transformer,
                     lambda length, block, tok, mode: HybridPredictor(length, block, tokenizer=tok, threshold=None,
                                                                      stop_at_eos=False),
                     ("cached",)),
}


def _generate(model, predictor, batch, device: str):
    fed = []
    handle = model.register_forward_pre_hook(lambda module, args, kwargs: fed.append(args[0].numel()),
                                             with_kwargs=True)
    if device == "cuda":
        torch.cuda.synchronize()
    start, start_cpu = time.perf_counter(), time.process_time()
    prediction = predictor.predict(batch, model=model)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
    handle.remove()
    return prediction["ids"], seconds, cpu_seconds, sum(fed)


def measure(family: Family, model, tokenizer, length: int, block_size: int, batch_size: int, device: str) -> dict:
    batch = {"input_ids": torch.full((batch_size, 1), tokenizer.bos_token_id, device=device),
             "attention_mask": torch.ones((batch_size, 1), dtype=torch.bool, device=device),
             "sample_index": torch.arange(batch_size, device=device)}
    generated = length * batch_size
    result = {"length": length, "block_size": block_size}
    ids = {}
    for mode in family.modes:
        predictor = family.predictor(length, block_size, tokenizer, mode)
        ids[mode], seconds, cpu_seconds, fed = _generate(model, predictor, batch, device)
        result[f"{mode}_ms_per_token"] = round(1000 * seconds / generated, 4)
        result[f"{mode}_cpu_ms_per_token"] = round(1000 * cpu_seconds / generated, 4)
        result[f"{mode}_tokens_run_per_token"] = round(fed / generated, 2)
    if "recomputed" in ids:
        if not torch.equal(ids["cached"], ids["recomputed"]):
            raise RuntimeError(f"length {length}, block {block_size}: cached and recomputed tokens differ")
        for ratio, field in (("time_ratio", "ms_per_token"), ("cpu_time_ratio", "cpu_ms_per_token"),
                             ("tokens_run_ratio", "tokens_run_per_token")):
            result[ratio] = round(result[f"recomputed_{field}"] / result[f"cached_{field}"], 2)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", choices=sorted(FAMILIES), default="bd3lm")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--batch-size", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    tokenizer = NumberTokenizer()
    family = FAMILIES[args.family]
    model = family.network(**{**NETWORK, "attn_backend": "sdpa"}).to(args.device).eval()
    measure(family, model, tokenizer, 32, 4, args.batch_size, args.device)  # warm-up
    results = [measure(family, model, tokenizer, length, block_size, args.batch_size, args.device)
               for length in args.lengths for block_size in args.block_sizes]
    device = torch.cuda.get_device_name() if args.device == "cuda" else f"cpu, {args.threads} thread(s)"
    print(json.dumps({"bench": "block_decoding", "family": args.family, "modes": list(family.modes),
                      "device": device, "torch": torch.__version__, "batch_size": args.batch_size,
                      "network": NETWORK, "results": results}))


if __name__ == "__main__":
    main()
