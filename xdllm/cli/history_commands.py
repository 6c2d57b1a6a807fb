"""What ``xdllm history tensorboard / show / revisions`` do once parsed (the parser is
:mod:`xdllm.cli.history`, which loads none of this)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from xdllm.config.override_text import shell_word
from xdllm.counted import counted
from xdllm.history.format import HistoryError
from xdllm.history.reader import iter_samples
from xdllm.history.revisions import count_revisions
from xdllm.history.selection import Selection, select, select_sample
from xdllm.history.show import format_replay
from xdllm.history.storage import HISTORY_SUBDIR, read_history_file
from xdllm.history.tensorboard import TextOptions, remove_event_files, write_tensorboard
from xdllm.history.view_defaults import VIEW_COMMAND

TENSORBOARD_SUBDIR = Path("tensorboard") / "history"


def tensorboard_command(args: argparse.Namespace) -> int:
    selections = select(args.paths, args.all)
    logdirs = _logdirs(selections, args.logdir)
    text = TextOptions(steps_per_card=args.steps_per_card, masked_positions=args.positions)
    failed = False
    for selection, logdir in zip(selections, logdirs):
        print(selection.describe())
        try:
            logdir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            elsewhere = " (--logdir DIR writes them elsewhere)" if args.logdir is None else ""
            raise HistoryError(f"cannot write the views to {logdir}: {error.strerror or error}{elsewhere}") from error
        removed = remove_event_files(logdir)
        if removed:
            print(f"replacing the views written before: removed {counted(removed, 'history event file')} in {logdir}")
        report = write_tensorboard(selection.files, logdir, max_samples=args.max_samples,
                                   max_frames=args.max_frames, text=text, grid=args.grid)
        fewer = f" of {report.counted}" if report.written < report.counted else ""
        statistics = f" (--max-samples; the statistics count all {report.counted})" if fewer else ""
        print(f"wrote {report.written}{fewer} samples to {logdir}{statistics}")
        for path, reason in report.bad_files:
            print(f"xdllm history: error: skipped {path}: {reason}", file=sys.stderr)
        failed = failed or bool(report.bad_files)
    common = args.logdir if args.logdir is not None else Path(os.path.commonpath(logdirs))
    print("view: " + VIEW_COMMAND.format(logdir=shell_word(str(common))))
    return 1 if failed else 0


def show_command(args: argparse.Namespace) -> int:
    sample = select_sample(args.paths, args.all, args.sample, say=print)
    print(format_replay(sample, step=args.step, k=args.k, color=_use_color(args.color),
                        masked_positions=args.positions))
    return 0


def revisions_command(args: argparse.Namespace) -> int:
    selections = select(args.paths, args.all)
    for selection in selections:
        print(selection.describe(), file=sys.stderr)
    files = [file for selection in selections for file in selection.files]
    counts = count_revisions(sample for file in files for sample in iter_samples(file))
    print(json.dumps(counts.summary(), indent=2))
    return 0


def _logdirs(selections: list[Selection], logdir: Path | None) -> list[Path]:
    """Each selection's event folder: ``logdir`` for one, ``logdir/<folder label>`` for several,
    and without ``logdir`` each folder's own ``<run>/tensorboard/history[/<label>]``."""
    if logdir is not None:
        if len(selections) == 1:
            return [logdir]
        return [logdir / label for label in _labels(selections)]
    defaults = [_default_logdir(selection) for selection in selections]
    if len(set(defaults)) == len(defaults):
        return defaults
    return [base / label for base, label in zip(defaults, _labels(selections))]


def _labels(selections: list[Selection]) -> list[str]:
    """A distinct short name per folder: ``val-step0000100``, a generation folder's name."""
    labels: list[str] = []
    for selection in selections:
        folder = selection.folder
        label = folder.parent.name if folder.name == HISTORY_SUBDIR else folder.name
        candidate, number = label, 1
        while candidate in labels:
            number += 1
            candidate = f"{label}-{number}"
        labels.append(candidate)
    return labels


def _default_logdir(selection: Selection) -> Path:
    """:func:`default_logdir` of the selection's folder; a file outside a run that is no history
    file is refused for that, not for its place."""
    try:
        return default_logdir(selection.folder)
    except HistoryError:
        if selection.note == "file":
            read_history_file(selection.path)
        raise


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
