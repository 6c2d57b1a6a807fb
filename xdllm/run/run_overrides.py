"""A run remembers the overrides it was composed from, so ``xdllm train resume=<run>`` alone
continues it with the same config.

``<run_dir>/overrides.yaml`` lists the command's overrides (those of every resume before it
included, ``resume=`` left out), their relative paths made absolute (``xdllm/config/run_paths.py``),
so a run resumes from any directory. Resuming composes the stored ones first and the command's own
after them: Hydra takes the last value given for a key (or a config group), so
``xdllm train resume=runs/x trainer.max_steps=3000`` extends the run and changes nothing else.
A run made before this file existed has none: its overrides must be given again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from xdllm.config.override_text import command
from xdllm.errors import XdllmError
from xdllm.run.run_checkpoint import run_dir_of
from xdllm.temporary_files import write_text_atomically

OVERRIDES_FILE = "overrides.yaml"


def save_overrides(run_dir: Path, overrides: Sequence[str]) -> None:
    """Write ``<run_dir>/overrides.yaml`` (atomically)."""
    write_text_atomically(run_dir / OVERRIDES_FILE, yaml.safe_dump([str(override) for override in overrides]))


def resumed_run_dir(resume: str) -> Path:
    """The run directory ``resume=`` names: the folder given, or the run of the checkpoint given."""
    path = Path(resume).expanduser()
    return path.resolve() if path.is_dir() else run_dir_of(path)


def with_stored_overrides(resume: str | None, overrides: Sequence[str]) -> list[str]:
    """``overrides`` after those the resumed run stored (none when not resuming, or when the run
    stored none)."""
    if not resume:
        return list(overrides)
    try:
        stored = stored_overrides(resumed_run_dir(resume))
    except XdllmError as error:
        raise XdllmError(f"resume: {error}") from error
    return [*(stored or []), *overrides]


def stored_overrides(run_dir: Path) -> list[str] | None:
    """The overrides ``run_dir`` stored (None: it has no ``overrides.yaml``, a run made before the
    file existed); one that cannot be read or is no list of strings is refused, naming it."""
    path = run_dir / OVERRIDES_FILE
    if not path.is_file():
        return None
    try:
        stored = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise XdllmError(f"{path} is not readable: {' '.join(str(error).split())}") from error
    if not isinstance(stored, list) or not all(isinstance(override, str) for override in stored):
        raise XdllmError(f"{path} must hold a list of overrides (KEY=VALUE strings)")
    return stored


def continue_command(run_dir: Path, extra: Sequence[str] = ()) -> str:
    """``xdllm train [extra] resume=<run_dir>``: the run's stored config, continued in place."""
    return command("xdllm", "train", *extra, f"resume={run_dir}")
