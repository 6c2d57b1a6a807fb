"""``xdllm history play <run-dir-or-file> [--sample N] [--delay S]``: one sample's denoising
played in the terminal, coloured by confidence (:mod:`xdllm.history.live`)."""

from __future__ import annotations

import argparse
from itertools import islice
from pathlib import Path

from rich.console import Console

from xdllm.history.format import HistoryError
from xdllm.history.live import play
from xdllm.history.reader import iter_samples


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def add_play_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    play_parser = commands.add_parser(
        "play", help="play one sample's denoising in the terminal, coloured by confidence")
    play_parser.add_argument("path", type=Path, help="history file, history directory or run directory")
    play_parser.add_argument("--sample", type=int, default=0,
                             help="sample index, counted over the files in order (default 0)")
    play_parser.add_argument("--delay", type=_non_negative_float, default=0.3,
                             help="seconds per step on a terminal (default 0.3; 0: print every step)")
    return play_parser


def run_play(args: argparse.Namespace, console: Console | None = None) -> int:
    if args.sample < 0:
        raise HistoryError(f"--sample must be >= 0, got {args.sample}")
    sample = next(islice(iter_samples(args.path), args.sample, None), None)
    if sample is None:
        total = sum(1 for _ in iter_samples(args.path))
        raise HistoryError(f"{args.path}: sample {args.sample} out of range ({total} samples recorded)")
    play(sample, console or Console(), delay=args.delay)
    return 0
