"""``xdllm generate -m KEY=A,B,...``: one generation per combination of the swept values, each in
a folder named by its settings, all under one sweep folder::

    <run_dir>/generate/sweep-<time>/threshold=0.5/   predictions.jsonl, generate.yaml, tensorboard/
    <run_dir>/generate/sweep-<time>/threshold=0.7/
    <run_dir>/generate/sweep-<time>/sweep.jsonl      one line per generation: settings and results
    <run_dir>/generate/sweep-<time>/sweep.yaml       the overrides and checkpoint, for resume=

Values are swept with Hydra's override grammar (``a=1,2,3``, ``a=range(1,4)``, ``a=choice(x,y)``);
several swept keys give their Cartesian product. The checkpoint is loaded once. Every combination
is checked before the first runs (a bad value wastes no generation); each then runs as checked,
drawing its held-out samples once. A sweep stopped part-way is continued as a whole with
``xdllm generate resume=<sweep folder>`` (:func:`continue_sweep`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from xdllm.config.compose import compose_config, first_swept_override
from xdllm.config.override_text import check_override_syntax
from xdllm.config.schema import override_key
from xdllm.errors import XdllmError
from xdllm.evaluate.generative_perplexity import GenerativeJudge
from xdllm.folder_names import SWEEP_PLAN, refuse_other_kind
from xdllm.run.checkpoint import TrainedRun
from xdllm.run.generate import continue_generation, load_run, run_generation, write_views
from xdllm.run.generation_check import CheckedGeneration, check_generation
from xdllm.run.generation_folder import (
    PREDICTIONS,
    SUMMARY,
    VIEWS_UNFINISHED,
    discard_unfinished,
    generation_content_in,
    make_output_dir,
    read_summary,
    resume_command,
    stopped_hint,
    sweep_of,
)
from xdllm.run.generation_record import parse_record_json, read_record, settings_name
from xdllm.run.new_folder import make_new_folder, time_stamp
from xdllm.run.partial_generation import PARTIAL_STATE
from xdllm.run.run_log import start_generation_log
from xdllm.run.sweep_repeats import refuse_repeats
from xdllm.temporary_files import remove_stale_temporaries, write_jsonl_atomically, write_text_atomically

SWEEP_SUMMARY = "sweep.jsonl"
GENERATION_SPEED = ("mean_steps", "tokens_per_second")
SWEEP_EXAMPLES = {"generate": "predictor.threshold=0.5,0.7,0.9", "train": "optim.lr=1e-3,3e-4 seed=0,1"}
"""What a refusal of a sweep with nothing swept shows, for each command."""
"""A generation summary's figures of its speed, not scores."""
log = logging.getLogger(__name__)


def _display_key(key: str) -> str:
    return key.removeprefix("predictor.")


def refuse_sweep_without_multirun(overrides: Sequence[str]) -> None:
    """``KEY=A,B`` without ``-m`` would be one run given a list: say how to sweep instead."""
    swept = first_swept_override(overrides)
    if swept is not None:
        raise XdllmError(f"{swept.input_line} gives several values: add -m to run one generation "
                         "per value (quote a single value that contains a comma)")


def sweep_combinations(overrides: Sequence[str], command_name: str = "generate"
                       ) -> tuple[list[str], list[dict[str, str]]]:
    """The fixed overrides, and one ``{key: value}`` per combination of the swept ones of a sweep
    of ``command_name`` (train, generate; none swept is refused, with an example)."""
    check_override_syntax(overrides, command_name, sweep=True)
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    fixed = [override.input_line for override in parsed if not override.is_sweep_override()]
    swept = [override for override in parsed if override.is_sweep_override()]
    if not swept:
        raise XdllmError(f"-m (sweep) needs at least one swept option, e.g. {SWEEP_EXAMPLES[command_name]}")
    keys = [override.get_key_element() for override in swept]
    values = [_swept_values(override) for override in swept]
    for override, given in zip(swept, values):
        if not given:
            raise XdllmError(f"-m: {override.input_line} gives no value, so the sweep would run nothing: give at "
                             "least one")
    return fixed, [dict(zip(keys, combination)) for combination in itertools.product(*values)]


def _swept_values(override: Any) -> list[str]:
    """The values a swept override gives, in order; one Hydra cannot list (``interval(0,1)``, a
    zero step, ``glob`` of a non-group option) is refused in one line."""
    try:
        return list(override.sweep_string_iterator())
    except (ValueError, HydraException) as error:
        glob = override.value_type == ValueType.GLOB_CHOICE_SWEEP
        reason = "glob() is not supported" if glob else str(error).splitlines()[0]
        raise XdllmError(f"-m: {override.input_line} cannot be swept: {reason} (give the values: a=1,2,3, "
                         "range(0,3), choice(x,y))") from error


def _sweep_dir(requested: str | None, run_dir: Path) -> tuple[Path, Path | None]:
    """The sweep's folder, and the outermost folder made for it (None if it existed)."""
    if requested:
        folder = Path(requested).expanduser()
        return folder, make_output_dir(folder)
    folder = make_new_folder(run_dir / "generate", f"sweep-{time_stamp()}")
    return folder, folder


def sweep_configs(overrides: Sequence[str]) -> tuple[list[dict[str, str]], list[DictConfig]]:
    """Each combination and its composed ``generate`` config (all checked before any runs)."""
    fixed, combinations = sweep_combinations(overrides)
    for key in combinations[0]:
        if override_key(key) in ("ckpt", "output_dir", "ema"):
            raise XdllmError(f"{override_key(key)} cannot be swept: a sweep runs one checkpoint's weights into one "
                             "folder")
    refuse_repeats(_folder_names(combinations), "generation")
    return combinations, [compose_config("generate", [*fixed, *(f"{k}={v}" for k, v in combination.items())])
                          for combination in combinations]


def _folder_names(combinations: Sequence[dict[str, str]]) -> list[str]:
    return [settings_name({_display_key(k): v for k, v in combination.items()}) for combination in combinations]


@dataclass
class _Planned:
    """One generation of a sweep: its swept values, its folder's name, its composed config, and
    either the checked generation to run or (None) a stopped generation in its folder to continue."""

    combination: dict[str, str]
    name: str
    config: DictConfig
    generation: CheckedGeneration | None


def run_sweep(overrides: Sequence[str]) -> dict[str, Any]:
    """Generate once per combination; return the sweep folder and each generation's results."""
    combinations, configs = sweep_configs(overrides)
    if OmegaConf.is_missing(configs[0], "ckpt"):
        raise XdllmError("ckpt=<checkpoint file or run directory> is required")
    run = load_run(configs[0])
    # a bad value is refused before the first generation runs; each runs as checked (its
    # held-out samples drawn once, when it runs)
    judges: dict[str, GenerativeJudge] = {}  # one judge for every generation that names it
    generations = [check_generation(run, config, judges=judges) for config in configs]
    sweep_dir, made = _sweep_dir(configs[0].output_dir, run.run_dir)
    if (sweep_dir / SWEEP_PLAN).exists():
        raise XdllmError(f"{sweep_dir} holds a sweep already ({SWEEP_PLAN}); choose another output_dir"
                         f"{stopped_hint(sweep_dir)}")
    names = _folder_names(combinations)
    for name in names:
        held = generation_content_in(sweep_dir / name)
        if held:
            raise XdllmError(f"{sweep_dir / name} already holds {', '.join(held)}; choose another output_dir"
                             f"{stopped_hint(sweep_dir / name)}")
    write_text_atomically(sweep_dir / SWEEP_PLAN, OmegaConf.to_yaml(OmegaConf.create(
        {"overrides": list(overrides), "checkpoint": str(run.checkpoint), "global_step": run.global_step})))
    plan = [_Planned(*planned) for planned in zip(combinations, names, configs, generations)]
    start_generation_log(sweep_dir)
    return _run_planned(run, sweep_dir, plan, [], made=made)


def continue_stopped(folder: Path, overrides: Sequence[str]) -> dict[str, Any]:
    """``xdllm generate resume=<folder>``: continue the stopped sweep (a folder with ``sweep.yaml``)
    or the stopped generation ``folder`` holds; a generation of a sweep is continued with its
    sweep, so that ``sweep.jsonl`` covers it."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise XdllmError(f"resume={folder}: no such folder; give the folder a stopped xdllm generate named")
    refuse_other_kind(folder, ("generation", "generation sweep"),
                      "xdllm generate resume= takes a stopped generation's or a generation sweep's")
    if (folder / SWEEP_PLAN).is_file():
        return continue_sweep(folder, overrides)
    sweep = sweep_of(folder)
    if sweep is not None:
        raise XdllmError(f"{folder} is one generation of the sweep in {sweep}: continue the sweep with: "
                         f"{resume_command(sweep)}")
    return continue_generation(folder, overrides)


def continue_sweep(sweep_dir: Path, overrides: Sequence[str]) -> dict[str, Any]:
    """``xdllm generate resume=<sweep folder>``: finish a stopped sweep with the overrides it
    started with (its ``sweep.yaml``) and the same checkpoint file at the same training step;
    ``overrides`` may set only ``RESUME_OPTIONS``. Generations it finished are kept (their lines
    of ``sweep.jsonl``), a stopped one is continued, the others are run. Returns what
    :func:`run_sweep` returns, for the whole sweep."""
    record = read_record(sweep_dir / SWEEP_PLAN, ("overrides", "checkpoint", "global_step"))
    # the sweep's overrides, less those of a key given now (a +frozen.<name>= given twice would be refused)
    given = {override_key(text) for text in overrides}
    combinations, configs = sweep_configs([*(text for text in record.overrides if override_key(text) not in given),
                                           *overrides])
    run = load_run(configs[0], record.checkpoint)
    if run.global_step != record.global_step:
        raise XdllmError(f"{run.checkpoint} now holds training step {run.global_step}, but the sweep in {sweep_dir} "
                         f"started from step {record.global_step}: the rest would come from other weights; start "
                         "a new sweep")
    summary_path = sweep_dir / SWEEP_SUMMARY
    earlier = {line["folder"]: line for line in sweep_summary_lines(summary_path)}
    results, plan, views_cut, unlisted = [], [], [], 0
    judges: dict[str, GenerativeJudge] = {}
    for combination, name, config in zip(combinations, _folder_names(combinations), configs):
        folder = sweep_dir / name
        if name in earlier:
            results.append(earlier[name])
        elif (folder / PREDICTIONS).exists() and (folder / SUMMARY).is_file():  # stopped in its views, or after
            results.append({"settings": swept_settings(combination, config), "folder": name,
                            **read_summary(folder)})
            unlisted += 1
            if (folder / VIEWS_UNFINISHED).is_file():
                views_cut.append((folder, config, results[-1]["predictions"]))
        elif (folder / PREDICTIONS).exists():
            raise XdllmError(f"{folder} holds finished predictions without their {SUMMARY}: move that folder away "
                             "and resume again to generate it anew")
        elif (folder / PARTIAL_STATE).is_file():
            plan.append(_Planned(combination, name, config, None))
        elif generation_content_in(folder):
            raise XdllmError(f"{folder} holds {', '.join(generation_content_in(folder))} but no generation the "
                             "sweep can keep or continue: move it away and resume again")
        else:  # checked now, before anything runs, as a new sweep checks its combinations
            plan.append(_Planned(combination, name, config, check_generation(run, config, judges=judges)))
    if not plan and not unlisted:
        raise XdllmError(f"the sweep in {sweep_dir} has finished all {len(results)} generations: there is nothing "
                         "to continue")
    remove_stale_temporaries(sweep_dir)
    start_generation_log(sweep_dir)
    log.info("continuing the sweep in %s: %d of %d generations finished", sweep_dir, len(results) - len(views_cut),
             len(combinations))
    for folder, config, predictions in views_cut:
        log.info("drawing the TensorBoard views of %s again: the stop cut them short", folder)
        write_views(folder, run, config.history_tensorboard_samples, predictions)
    if unlisted:
        write_jsonl_atomically(summary_path, results)
    return _run_planned(run, sweep_dir, plan, results, resume_overrides=overrides)


_NOT_IN_CONFIG = object()


def swept_settings(combination: dict[str, str], config: DictConfig) -> dict[str, Any]:
    """A sweep's swept keys and their values as composed (numbers as numbers; ``sweep.jsonl``'s
    ``settings``); a config group (``model=mlm,mdlm``) by the option chosen, as is one that is no
    key of the composed config (``experiment=sort_mlm,sort_mdlm``)."""
    settings = {}
    for key, given in combination.items():
        value = OmegaConf.select(config, override_key(key), default=_NOT_IN_CONFIG)
        settings[key] = given if value is _NOT_IN_CONFIG or OmegaConf.is_config(value) else value
    return settings


def sweep_summary_lines(path: Path) -> list[dict[str, Any]]:
    """The lines of a stopped sweep's ``sweep.jsonl`` (none if it finished no generation)."""
    if not path.is_file():
        return []
    lines = [parse_record_json(line, f"{path}:{number}")
             for number, line in enumerate(path.read_text().splitlines(), start=1)]
    for number, line in enumerate(lines, start=1):
        if not isinstance(line, dict) or "folder" not in line:
            raise XdllmError(f"{path}:{number} names no folder: it was edited or not written by xdllm")
    return lines


def _run_planned(run: TrainedRun, sweep_dir: Path, plan: Sequence[_Planned], results: list[dict[str, Any]],
                 made: Path | None = None, resume_overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Run (or continue) each planned generation into its folder of ``sweep_dir``, adding its
    results to ``results`` and rewriting ``sweep.jsonl`` after each."""
    path = sweep_dir / SWEEP_SUMMARY
    total = len(results) + len(plan)
    try:
        for planned in plan:
            folder = sweep_dir / planned.name
            settings = swept_settings(planned.combination, planned.config)
            outside_predictor = {override_key(key): value for key, value in settings.items()
                                 if not override_key(key).startswith("predictor.")}
            if planned.generation is None:
                summary = continue_generation(folder, resume_overrides, run=run, swept=outside_predictor)
            else:
                planned.generation.options.output_dir = str(folder)
                summary = run_generation(run, planned.generation, swept=outside_predictor)
            results.append({"settings": settings, "folder": planned.name, **summary})
            write_jsonl_atomically(path, results)  # after each, so a failed sweep keeps what finished
    except BaseException:
        if made is not None and not results and not any(generation_content_in(sweep_dir / p.name) for p in plan):
            (sweep_dir / SWEEP_PLAN).unlink(missing_ok=True)
            discard_unfinished(sweep_dir, made)
        elif len(results) < total:
            kept = f" (their results are in {path})" if results else ""
            log.warning("the sweep stopped with %d of %d generations finished%s; continue it with: %s",
                        len(results), total, kept, resume_command(sweep_dir))
        raise
    log.info("the sweep's generations:\n%s", "\n".join(f"  {line['folder']}: {result_figures(line)}"
                                                         for line in results))
    return {"sweep": str(sweep_dir), "summary": str(path), "runs": results}


def result_figures(line: dict[str, Any], leave_out: Sequence[str] = ()) -> str:
    """``exact_match=0.998, token_accuracy=0.9998, mean_steps=3.1, ...``: the figures of a sweep's
    line, a generation's scores and then its speed, less ``leave_out``."""
    figures = [name for name, value in line.items() if isinstance(value, float) and name not in leave_out]
    figures.sort(key=lambda name: name in GENERATION_SPEED)
    return ", ".join(f"{name}={_figure(line[name])}" for name in figures)


def _figure(value: float) -> str:
    """Four significant digits, and a large figure whole (``11042``, not ``1.104e+04``)."""
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
