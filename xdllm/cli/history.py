"""``xdllm history``: render recorded denoising histories (TensorBoard or terminal).

Each PATH is a history file, or a folder: a run directory, a generation folder or a history
folder. A folder stands for its newest generation (the history folder whose files were written
last) unless ``--all`` is given; the command says which folder it used. Failures (missing or
corrupt file, index out of range) print one line on stderr and return 1; a closed stdout
(``| head``) returns 141 quietly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from xdllm.cli.history_play import add_play_parser
from xdllm.history.view_defaults import (
    DEFAULT_MASKED_POSITIONS,
    DEFAULT_MAX_FRAMES,
    DEFAULT_MAX_SAMPLES,
    DEFAULT_STEPS_PER_CARD,
)

DESCRIPTION = """\
View recorded denoising histories.

  xdllm history tensorboard PATH... [--logdir DIR] [--all] [--max-samples N]
          [--max-frames N] [--steps-per-card N] [--positions N] [--grid ROWSxCOLS]
      write TensorBoard views (default: <run_dir>/tensorboard/history, or
      <generation folder>/tensorboard/history); a rerun replaces the views it wrote
  xdllm history show PATH... [--sample N] [--step S] [--k K] [--positions N]
          [--color {auto,always,never}] [--all]
      print one sample's denoising, step by step
  xdllm history play PATH [--sample N] [--delay S] [--all]
      play one sample's denoising in the terminal, coloured by confidence
  xdllm history revisions PATH... [--all]
      count tokens revised after they were written, and how many revisions
      fixed or broke a token against the target (JSON)

Each PATH is a history file, or a folder (a run directory, a generation folder
or a history folder). A folder stands for its newest generation, the history
folder written last, unless --all is given; the command says which folder it
used. Errors print one line and exit with status 1; output cut short by a closed
pipe (| head) ends quietly with status 141, as for other command-line tools.
"""


def add_history_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``history`` command and its ``tensorboard`` / ``show`` / ``play`` / ``revisions``
    subcommands."""
    parser = subparsers.add_parser(
        "history", help="view recorded denoising histories", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="history_command", metavar="{tensorboard,show,play,revisions}")
    commands.required = True

    board = commands.add_parser("tensorboard", help="write TensorBoard views of histories",
                                description="Write TensorBoard views (text, pictures, scalars) of "
                                            "recorded denoising histories. A rerun replaces them: "
                                            "the history event files (*.history) directly in each "
                                            "folder it writes are deleted first (it says how "
                                            "many); nothing else.")
    _add_paths(board)
    board.add_argument(
        "--logdir", type=Path, default=None,
        help="event file directory (default: tensorboard/history in the folder holding the "
             "history/ folder, i.e. the run directory or the generation folder; with several "
             "folders, one subfolder each)",
    )
    board.add_argument("--max-samples", type=_non_negative, default=DEFAULT_MAX_SAMPLES,
                       help=f"samples drawn per folder, as text cards and pictures (default "
                            f"{DEFAULT_MAX_SAMPLES}; 0: none); the statistics count every sample")
    board.add_argument("--max-frames", type=_positive, default=DEFAULT_MAX_FRAMES,
                       help=f"denoising pictures per sample (default {DEFAULT_MAX_FRAMES})")
    board.add_argument("--steps-per-card", type=_positive, default=DEFAULT_STEPS_PER_CARD,
                       help=f"steps per text card (default {DEFAULT_STEPS_PER_CARD})")
    board.add_argument("--positions", type=_non_negative, default=DEFAULT_MASKED_POSITIONS,
                       help="masked positions whose top-k is listed per step "
                            f"(default {DEFAULT_MASKED_POSITIONS})")
    board.add_argument("--grid", type=_grid_shape, default=None, metavar="ROWSxCOLS",
                       help="also draw each output as a grid of this shape, e.g. 9x9 for sudoku "
                            "(fill order and confidence per cell)")

    show = commands.add_parser("show", help="replay one sample's denoising in the terminal",
                               description="Print one sample's denoising, step by step.")
    _add_paths(show)
    show.add_argument("--sample", type=_non_negative, default=0,
                      help="sample index, counted over the selected files in order (default 0)")
    show.add_argument("--step", type=int, default=None, help="show only this step number")
    show.add_argument("--k", type=int, default=None, help="alternatives to show (default all)")
    show.add_argument("--positions", type=_non_negative, default=DEFAULT_MASKED_POSITIONS,
                      help="masked positions whose top-k is listed per step "
                           f"(default {DEFAULT_MASKED_POSITIONS})")
    show.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                      help="highlight committed tokens with ANSI colours (default auto)")
    add_play_parser(commands)

    revisions = commands.add_parser(
        "revisions", help="count revised tokens and whether revisions fixed errors (JSON)",
        description="Count tokens replaced by another token after they were written (a predictor "
                    "that revises its canvas, e.g. udlm; masked diffusion never does), revised "
                    "positions, and against the target how many revised positions were fixed "
                    "(first token wrong, final right) or broken (first right, final wrong).")
    _add_paths(revisions)
    return parser


def _add_paths(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", type=Path, nargs="+", metavar="PATH",
                        help="history file, history folder, generation folder or run directory")
    parser.add_argument("--all", action="store_true",
                        help="every history folder under each PATH, not only the newest")


def run_history_command(args: argparse.Namespace) -> int:
    """Run a parsed ``history`` command; return the process exit status. The commands load torch
    (and the views matplotlib) here, not when the command line is built."""
    from xdllm.cli.history_commands import revisions_command, show_command, tensorboard_command
    from xdllm.cli.history_play import run_play
    from xdllm.history.format import HistoryError

    commands = {"tensorboard": tensorboard_command, "show": show_command, "play": run_play,
                "revisions": revisions_command}
    try:
        return commands[args.history_command](args)
    except BrokenPipeError:
        raise  # `xdllm` ends quietly on it (xdllm.cli.main)
    except (HistoryError, OSError) as error:
        print(f"xdllm history: error: {error}", file=sys.stderr)
        return 1


def _grid_shape(value: str) -> tuple[int, int]:
    rows, sep, cols = value.lower().partition("x")
    if not sep or not rows.isdigit() or not cols.isdigit() or int(rows) < 1 or int(cols) < 1:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS such as 9x9, got {value!r}")
    return int(rows), int(cols)


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value
