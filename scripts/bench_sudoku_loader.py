"""How fast one CPU process makes sudoku training batches, and so how many steps per second a
run's loader processes can feed.

Part 1: milliseconds per puzzle of ``make_puzzle`` at 45, 30 and 25 givens (seeds 0..N-1).
Part 2: seconds per training batch of an experiment (``--experiment``, default
``sudoku_mlm_gpu``): its training stream and train collator in this process, as one DataLoader
worker runs them, and the steps per second its ``data.num_workers`` processes supply at most.

Usage: ``OMP_NUM_THREADS=1 python scripts/bench_sudoku_loader.py [--puzzles 100] [--batches 4]
[--experiment sudoku_mlm_gpu]``. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from xdllm.config.compose import compose_config
from xdllm.data.datamodule import TrainStream
from xdllm.data.samplers import StreamIndex
from xdllm.data.sudoku import make_puzzle
from xdllm.run.build import build_components


def ms_per_puzzle(givens: int, puzzles: int) -> float:
    start = time.perf_counter()
    for seed in range(puzzles):
        make_puzzle(random.Random(seed), givens)
    return (time.perf_counter() - start) / puzzles * 1000


def seconds_per_batch(experiment: str, batches: int) -> tuple[float, int, int]:
    """Seconds per training batch in one process, the batch size and the run's loader processes."""
    config = compose_config("train", [f"experiment={experiment}", "data.num_val_samples=1", "data.num_test_samples=1"])
    components = build_components(config)
    stream = TrainStream(components.task, components.tokenizer, config.seed, frozenset())
    collate, size = components.collators["train"], int(config.data.batch_size)
    start = time.perf_counter()
    for step in range(batches):
        collate([stream[StreamIndex(step * size + i, step)] for i in range(size)])
    return (time.perf_counter() - start) / batches, size, int(config.data.num_workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puzzles", type=int, default=100, help="puzzles timed per number of givens")
    parser.add_argument("--batches", type=int, default=4, help="training batches timed")
    parser.add_argument("--experiment", default="sudoku_mlm_gpu")
    args = parser.parse_args()
    if args.puzzles < 1 or args.batches < 1:
        parser.error("--puzzles and --batches must be >= 1")
    per_puzzle = {givens: round(ms_per_puzzle(givens, args.puzzles), 2) for givens in (45, 30, 25)}
    batch_seconds, batch_size, workers = seconds_per_batch(args.experiment, args.batches)
    print(json.dumps({
        "ms_per_puzzle_by_givens": per_puzzle,
        "experiment": args.experiment,
        "batch_size": batch_size,
        "seconds_per_batch_one_process": round(batch_seconds, 3),
        "num_workers": workers,
        "loader_steps_per_second_at_most": round(workers / batch_seconds, 1),
        "load_average": os.getloadavg()[0],
    }))


if __name__ == "__main__":
    main()
