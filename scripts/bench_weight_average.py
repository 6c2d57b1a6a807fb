"""What ``optim.ema_decay`` costs per optimizer step: one update of the weight average, timed
against the model's size, and as a share of a training step where one is timed too.

    python scripts/bench_weight_average.py                      # the demo model and a 85M one
    python scripts/bench_weight_average.py --device cuda

Prints a line per model and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from xdllm.config.compose import compose_config
from xdllm.run.build import build_components
from xdllm.train.weight_average import WeightAverage

SIZES = {"demo": [], "85m": ["model.d_model=768", "model.n_layers=12", "model.n_heads=12"]}


def time_updates(model: torch.nn.Module, repeats: int, device: torch.device) -> float:
    """Milliseconds per :meth:`WeightAverage.update` (after three warm-up updates)."""
    average = WeightAverage(model, decay=0.999)
    for _ in range(3):
        average.update()
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        average.update()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - started) / repeats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    results = []
    for size in args.sizes:
        model = build_components(compose_config("train", ["experiment=sort_mlm", *SIZES[size]])).model.to(device)
        parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
        milliseconds = time_updates(model, args.repeats, device)
        print(f"{size:>5}: {parameters / 1e6:7.2f}M parameters, {milliseconds:8.3f} ms per update")
        results.append({"size": size, "parameters": parameters, "ms_per_update": round(milliseconds, 4)})
    print(json.dumps({"device": str(device), "threads": torch.get_num_threads(), "results": results}))


if __name__ == "__main__":
    main()
