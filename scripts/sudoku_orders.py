"""Solve the held-out sudoku puzzles of a trained run with every unmasking order.

For each setting (random order, top probability, probability margin, entropy; one cell per
step, then with a threshold that commits every cell above it) the run's checkpoint generates
the test split and the script prints one table row: solved rate, accuracy on the blank cells,
rule-valid grids and forward passes per puzzle. The last line is one JSON object with every row.

    python scripts/sudoku_orders.py --ckpt runs/sudoku_mlm
    python scripts/sudoku_orders.py --ckpt runs/sudoku_mlm --num-samples 128 --settings random margin
    python scripts/sudoku_orders.py --ckpt runs/sudoku_mlm --with predictor.max_steps=9 predictor.remask=true

Predictions are not written (``xdllm generate`` with the same ``predictor.*`` overrides does
that, with history); every setting uses the same puzzles and the same seed.
"""

from __future__ import annotations

import argparse
import json

from xdllm.config.compose import compose_config
from xdllm.run.checkpoint import load_trained
from xdllm.run.generate import generate

SETTINGS = {
    "random": ["predictor.confidence=null"],
    "top_prob": ["predictor.confidence=top_prob"],
    "margin": ["predictor.confidence=prob_diff"],
    "entropy": ["predictor.confidence=entropy"],
    "top_prob>=0.9": ["predictor.confidence=top_prob", "predictor.threshold=0.9"],
    "margin>=0.8": ["predictor.confidence=prob_diff", "predictor.threshold=0.8"],
    "entropy>=-0.3": ["predictor.confidence=entropy", "predictor.threshold=-0.3"],
}
"""Setting name -> predictor overrides. Without a threshold one cell is committed per step (unless
``--with`` gives ``predictor.max_steps``)."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True, help="a sudoku run directory or checkpoint")
    parser.add_argument("--split", default="test", choices=("test", "validation"))
    parser.add_argument("--num-samples", type=int, default=None,
                        help="puzzles to solve (default: the run's data.num_test_samples)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--with", dest="extra", nargs="+", default=[], metavar="OVERRIDE",
                        help="generate overrides added to every setting (e.g. predictor.max_steps=9 "
                             "predictor.remask=true)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    run = load_trained(args.ckpt)
    if run.components.task.name != "sudoku":
        raise SystemExit(f"{args.ckpt} was trained on task {run.components.task.name!r}, not sudoku")
    common = [f"ckpt={args.ckpt}", f"split={args.split}", f"batch_size={args.batch_size}", "history=null"]
    if args.num_samples is not None:
        common.append(f"num_samples={args.num_samples}")
    rows = []
    print(f"{'setting':<16} {'solved':>7} {'blank acc':>9} {'valid':>6} {'passes':>7} {'tok/s':>8}")
    for name in args.settings:
        overrides = [*SETTINGS[name], *args.extra]
        options = compose_config("generate", [*common, *overrides])
        result = generate(run, options, write_outputs=False)
        row = {"setting": name, "overrides": overrides, "num_samples": result["num_samples"],
               "solved": result["solved"], "blank_accuracy": result["blank_accuracy"],
               "rule_valid": result["rule_valid"], "forward_passes": result["mean_steps"],
               "tokens_per_second": result["tokens_per_second"]}
        rows.append(row)
        print(f"{name:<16} {row['solved']:>7.3f} {row['blank_accuracy']:>9.3f} {row['rule_valid']:>6.3f} "
              f"{row['forward_passes']:>7.1f} {row['tokens_per_second']:>8.0f}", flush=True)
    print(json.dumps({"checkpoint": str(run.checkpoint), "split": args.split, "rows": rows}))


if __name__ == "__main__":
    main()
