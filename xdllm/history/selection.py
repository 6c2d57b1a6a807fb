"""Which history files a command-line path stands for, shared by every ``xdllm history``
command: a file itself; a folder (run directory, generation folder, history folder) its newest
generation, the history folder written last, or with ``--all`` every one, oldest first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from xdllm.counted import counted
from xdllm.history.format import HistoryError
from xdllm.history.reader import SampleHistory, iter_samples
from xdllm.history.storage import find_history_files, history_folders


@dataclass(frozen=True)
class Selection:
    """History files picked for one command-line path, and how they were picked."""

    path: Path
    folder: Path
    files: list[Path]
    note: str

    def describe(self) -> str:
        """The line a command prints to say what it read: ``using <folder> (<how>)``."""
        if self.note == "file":
            return f"using {self.path}"
        return f"using {self.folder} ({self.note})"


def select(paths: list[Path], every_folder: bool = False) -> list[Selection]:
    """The history folders (or single files) the paths stand for: a file itself; a folder's
    newest generation, or with ``every_folder`` each of its history folders, oldest first."""
    selections = []
    for path in paths:
        if path.is_file():
            selections.append(Selection(path, path.parent, find_history_files(path), "file"))
            continue
        folders = history_folders(path)
        if every_folder:
            chosen = folders
            note = f"{counted(len(folders), 'history folder')} under {path}"
        else:
            chosen = folders[-1:]
            note = (f"newest of {len(folders)} history folders under {path}; --all for every one"
                    if len(folders) > 1 else f"the only history folder under {path}")
        selections += [Selection(path, folder, find_history_files(folder), note) for folder in chosen]
    return selections


def select_sample(paths: list[Path], every_folder: bool, index: int,
                  say: Callable[[str], None]) -> SampleHistory:
    """The ``index``-th sample over the files the paths stand for (:func:`select`), in order;
    ``say`` gets the line naming each folder or file read. Out of range raises, saying how many
    samples the files hold."""
    selections = select(paths, every_folder)
    for selection in selections:
        say(selection.describe())
    files = [file for selection in selections for file in selection.files]
    samples = (sample for file in files for sample in iter_samples(file))
    sample = next(islice(samples, index, None), None)
    if sample is None:
        total = sum(1 for file in files for _ in iter_samples(file))
        raise HistoryError(f"sample {index} out of range ({total} samples recorded in "
                           f"{counted(len(files), 'file')})")
    return sample
