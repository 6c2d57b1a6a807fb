"""A generation's folder: claimed for it alone (``output_dir``, or a new
``<run>/generate/<time>``), its ``predictions.jsonl`` written atomically, and what a failed
generation wrote removed if it finished nothing. A generation stopped part-way (Ctrl-C, SIGTERM,
an error) keeps the predictions of the batches it finished in ``predictions.partial.jsonl``, beside
their history files (:mod:`xdllm.run.partial_generation`); never in ``predictions.jsonl``, which
only a finished generation writes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from xdllm.config.override_text import command
from xdllm.errors import XdllmError
from xdllm.folder_names import GENERATE_CONFIG, SWEEP_PLAN
from xdllm.run.checkpoint import TrainedRun
from xdllm.run.generation_record import parse_record_json
from xdllm.run.new_folder import make_new_folder, time_stamp
from xdllm.run.partial_generation import PARTIAL_PREDICTIONS, PARTIAL_STATE
from xdllm.run.run_log import drop_generation_log
from xdllm.temporary_files import remove_stale_temporaries

PREDICTIONS = "predictions.jsonl"
SUMMARY = "summary.json"  # what the generation printed: its results, read back by a resumed sweep
VIEWS_UNFINISHED = "views.unfinished"  # while the TensorBoard views of a finished generation are drawn
GENERATION_CONTENT = (PREDICTIONS, SUMMARY, PARTIAL_PREDICTIONS, PARTIAL_STATE, GENERATE_CONFIG, "history",
                      "tensorboard")  # what a generation writes


def generation_content_in(folder: Path) -> list[str]:
    """What of :data:`GENERATION_CONTENT` ``folder`` holds already."""
    return [name for name in GENERATION_CONTENT if (folder / name).exists()]


def claim_output_dir(run: TrainedRun, requested: str | None, settings: str = "") -> tuple[Path, Path | None]:
    """A folder of this generation's own: ``output_dir`` if it holds nothing a generation writes
    (:data:`GENERATION_CONTENT`: a run's own folder, say, holds ``history`` and ``tensorboard``),
    claimed by creating its ``generate.yaml`` exclusively (two started at once: one is refused), else
    ``<run>/generate/<time>`` (``<time>_<settings>`` when predictor options were given) made with
    an exclusive ``mkdir`` (a numbered suffix when two start in the same second). Temporary files
    that interrupted generations left are removed first. Also returns the outermost folder this
    call made (None if the folder existed)."""
    generated = run.run_dir / "generate"
    if generated.is_dir():
        for folder in (generated, *(path for path in generated.rglob("*") if path.is_dir())):
            remove_stale_temporaries(folder)
    if requested:
        folder = Path(requested).expanduser()
        held = generation_content_in(folder)
        if not held:
            made = make_output_dir(folder)
            try:  # claimed by creating its generate.yaml: of two generations started at once, one gets it
                os.close(os.open(folder / GENERATE_CONFIG, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                return folder, made
            except FileExistsError:
                held = [GENERATE_CONFIG]
        raise XdllmError(f"output_dir {folder} already holds {', '.join(held)}; a generation writes those "
                         f"there and would overwrite or mix with them: choose another folder{stopped_hint(folder)}")
    folder = make_new_folder(generated, time_stamp() + (f"_{settings}" if settings else ""))
    return folder, folder


def read_summary(folder: Path) -> dict[str, Any]:
    """The results a finished generation in ``folder`` printed (its ``summary.json``)."""
    path = folder / SUMMARY
    value = parse_record_json(path.read_text(), path)
    if not isinstance(value, dict):
        raise XdllmError(f"{path} holds no JSON object: it was edited or not written by xdllm")
    return value


def sweep_of(folder: Path) -> Path | None:
    """The sweep folder ``folder`` is one generation of (its parent holds ``sweep.yaml``), if any."""
    return folder.parent if (folder.parent / SWEEP_PLAN).is_file() else None


def stopped_hint(folder: Path) -> str:
    """How to continue the stopped generation or sweep ``folder`` holds, if it holds one."""
    if (folder / SWEEP_PLAN).is_file():
        return f", or, if that sweep stopped part-way, continue it with: {resume_command(folder)}"
    views_cut = (folder / VIEWS_UNFINISHED).is_file()
    if not (folder / PARTIAL_STATE).is_file() and not views_cut:
        return ""
    sweep = sweep_of(folder)
    if sweep is not None:
        return f", or continue the stopped sweep with: {resume_command(sweep)}"
    if views_cut:
        return f", or draw the views a stop cut short with: {resume_command(folder)}"
    return f", or continue the stopped one with: {resume_command(folder)}"


def resume_command(folder: Path) -> str:
    """The command that continues the generation or sweep stopped in ``folder``."""
    return command("xdllm", "generate", f"resume={folder}")


def make_output_dir(folder: Path) -> Path | None:
    """Make ``output_dir`` and its parents; return the outermost folder made (None if it
    existed). A file in its place, or in a parent's, is refused."""
    missing = None
    for candidate in (folder, *folder.parents):
        if candidate.is_dir():
            break
        if candidate.exists():
            what = f"output_dir {folder}" if candidate == folder else f"{candidate}, a parent of output_dir {folder},"
            raise XdllmError(f"{what} is a file, not a folder; choose another output_dir")
        missing = candidate
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def discard_unfinished(folder: Path, made: Path | None) -> None:
    """After a generation failed: if it produced nothing (no predictions, finished or partial, no
    history file), remove the ``generate.yaml`` it wrote and its lines of ``generate.log``, and the
    folders it made if they are then empty. Anything a finished batch wrote stays."""
    history_dir = folder / "history"
    if any((folder / name).exists() for name in (PREDICTIONS, PARTIAL_PREDICTIONS)) or (
            history_dir.is_dir() and any(history_dir.iterdir())):
        return
    if history_dir.is_dir():
        history_dir.rmdir()
    (folder / GENERATE_CONFIG).unlink(missing_ok=True)
    drop_generation_log(folder)
    if made is None:
        return
    for candidate in (folder, *folder.parents):
        if any(candidate.iterdir()):
            return
        candidate.rmdir()
        if candidate == made:
            return

