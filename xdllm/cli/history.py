"""``xdllm history``: render recorded denoising histories (TensorBoard or terminal).

- ``xdllm history tensorboard <run-dir-or-file> [--logdir DIR] [--max-samples N]`` writes
  TensorBoard views (default ``<run_dir>/tensorboard/history``);
- ``xdllm history show <run-dir-or-file> [--sample N] [--step S] [--k K]`` prints a replay.

Failures (missing or corrupt file, index out of range) print one line on stderr and return 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from itertools import islice
from pathlib import Path

from xdllm.history.format import HistoryError
from xdllm.history.reader import iter_samples
from xdllm.history.render import DEFAULT_MASKED_POSITIONS
from xdllm.history.show import format_replay
from xdllm.history.storage import HISTORY_SUBDIR, find_history_files
from xdllm.history.tensorboard import DEFAULT_MAX_SAMPLES, write_tensorboard

TENSORBOARD_SUBDIR = Path("tensorboard") / "history"


def add_history_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``history`` command and its ``tensorboard`` / ``show`` subcommands."""
    parser = subparsers.add_parser(
        "history", help="view recorded denoising histories", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="history_command", metavar="{tensorboard,show}")
    commands.required = True

    board = commands.add_parser("tensorboard", help="write TensorBoard views of histories")
    board.add_argument("path", type=Path, help="run directory, history directory or file")
    board.add_argument(
        "--logdir", type=Path, default=None,
        help="event file directory (default: <run_dir>/tensorboard/history)",
    )
    board.add_argument(
        "--max-samples", type=_non_negative, default=DEFAULT_MAX_SAMPLES,
        help=f"samples to render (default {DEFAULT_MAX_SAMPLES})",
    )

    show = commands.add_parser("show", help="replay one sample's denoising in the terminal")
    show.add_argument("path", type=Path, help="history file, history directory or run directory")
    show.add_argument("--sample", type=_non_negative, default=0,
                      help="sample index, counted over the files in order (default 0)")
    show.add_argument("--step", type=int, default=None, help="show only this step number")
    show.add_argument("--k", type=int, default=None, help="alternatives to show (default all)")
    show.add_argument("--positions", type=_non_negative, default=DEFAULT_MASKED_POSITIONS,
                      help="masked positions whose top-k is listed per step "
                           f"(default {DEFAULT_MASKED_POSITIONS})")
    show.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                      help="highlight committed tokens with ANSI colours (default auto)")
    return parser


def run_history_command(args: argparse.Namespace) -> int:
    """Run a parsed ``history`` command; return the process exit status."""
    try:
        if args.history_command == "tensorboard":
            return _tensorboard(args)
        return _show(args)
    except (HistoryError, OSError) as error:
        print(f"xdllm history: error: {error}", file=sys.stderr)
        return 1


def _tensorboard(args: argparse.Namespace) -> int:
    find_history_files(args.path)
    logdir = args.logdir if args.logdir is not None else default_logdir(args.path)
    report = write_tensorboard(args.path, logdir, max_samples=args.max_samples)
    print(
        f"wrote {report.written} samples to {logdir}\n"
        f"view: tensorboard --logdir {logdir} --samples_per_plugin=text=1000"
    )
    for path, reason in report.bad_files:
        print(f"xdllm history: error: skipped {path}: {reason}", file=sys.stderr)
    return 1 if report.bad_files else 0


def _show(args: argparse.Namespace) -> int:
    sample = next(islice(iter_samples(args.path), args.sample, None), None)
    if sample is None:
        total = sum(1 for _ in iter_samples(args.path))
        raise HistoryError(
            f"{args.path}: sample {args.sample} out of range ({total} samples recorded)"
        )
    print(format_replay(sample, step=args.step, k=args.k, color=_use_color(args.color),
                        masked_positions=args.positions))
    return 0


def default_logdir(path: Path) -> Path:
    """``<run>/tensorboard/history`` for a run directory, its ``history`` folder, or anything
    below that folder (``history/val-step<N>/``, a single file)."""
    path = path.resolve()
    if (path / HISTORY_SUBDIR).is_dir():
        return path / TENSORBOARD_SUBDIR
    for ancestor in (path, *path.parents):
        if ancestor.name == HISTORY_SUBDIR:
            return ancestor.parent / TENSORBOARD_SUBDIR
    raise HistoryError(f"{path}: not inside a run directory (<run>/history); pass --logdir")


def _use_color(mode: str) -> bool:
    if mode != "auto":
        return mode == "always"
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value
