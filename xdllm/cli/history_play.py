"""``xdllm history play PATH [--sample N] [--delay S] [--all]``: one sample's denoising played in
the terminal, coloured by confidence (:mod:`xdllm.history.live`). PATH is resolved as for
``xdllm history show`` (:mod:`xdllm.history.selection`): a folder stands for its newest
generation, and the first lines say which folder was used."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.text import Text


class _Console(Console):
    def on_broken_pipe(self) -> None:  # rich exits with 1; end as every history command does
        raise BrokenPipeError


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def add_play_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    play_parser = commands.add_parser(
        "play", help="play one sample's denoising in the terminal, coloured by confidence",
        description="Play one sample's denoising in the terminal, coloured by confidence.")
    play_parser.add_argument("path", type=Path, metavar="PATH",
                             help="history file, history folder, generation folder or run directory "
                                  "(a folder: its newest generation)")
    play_parser.add_argument("--all", action="store_true",
                             help="every history folder under PATH, not only the newest")
    play_parser.add_argument("--sample", type=int, default=0,
                             help="sample index, counted over the selected files in order (default 0)")
    play_parser.add_argument("--delay", type=_non_negative_float, default=0.3,
                             help="seconds per step on a terminal (default 0.3; 0: print every step)")
    return play_parser


def run_play(args: argparse.Namespace, console: Console | None = None) -> int:
    from xdllm.history.format import HistoryError  # torch: loaded when a history is played
    from xdllm.history.live import play
    from xdllm.history.selection import select_sample

    if args.sample < 0:
        raise HistoryError(f"--sample must be >= 0, got {args.sample}")
    console = console or _Console()
    sample = select_sample([args.path], args.all, args.sample,
                           say=lambda line: console.print(Text(line), soft_wrap=True))
    play(sample, console, delay=args.delay)
    return 0
