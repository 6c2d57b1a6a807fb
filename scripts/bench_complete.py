"""Time of one ``xdllm.complete`` call on one prompt, with the run's predictor reused (no options)
and with one built per call (an option equal to the run's own: the same generation).

    python scripts/bench_complete.py runs/sort_mlm                  # the demo's run (make demo)
    python scripts/bench_complete.py runs/sort_mlm --prompt "7 6 5 5 5 4 9 6" --calls 200

Prints one JSON line: milliseconds per call, best of ``--repeats`` rounds of ``--calls`` calls,
on ``--threads`` torch threads, and the ratio reused / built.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from omegaconf import OmegaConf

import xdllm


def best_ms_per_call(call, calls: int, repeats: int) -> float:
    for _ in range(min(calls, 20)):  # warm up
        call()
    rounds = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        rounds.append((time.perf_counter() - started) / calls * 1e3)
    return min(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run directory or checkpoint")
    parser.add_argument("--prompt", default="7 6 5 5 5 4 9 6")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    run = xdllm.load_trained(args.run)
    options = OmegaConf.to_container(run.config.predictor, resolve=True)
    same = {key: value for key, value in options.items() if key != "_target_" and value is not None}
    same = dict([next(iter(same.items()))])  # one option, at the run's own value
    reused = best_ms_per_call(lambda: xdllm.complete(run, [args.prompt]), args.calls, args.repeats)
    built = best_ms_per_call(lambda: xdllm.complete(run, [args.prompt], predictor=same), args.calls, args.repeats)
    print(json.dumps({"run": str(run.checkpoint), "threads": args.threads, "reused_ms": round(reused, 2),
                      "built_per_call_ms": round(built, 2), "option": same,
                      "reused_over_built": round(reused / built, 3)}))


if __name__ == "__main__":
    main()
