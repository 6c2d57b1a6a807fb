"""``xdllm generate -m KEY=A,B,...``: one generation per combination of the swept values, each in
a folder named by its settings, all under one sweep folder::

    <run_dir>/generate/sweep-<time>/threshold=0.5/   predictions.jsonl, generate.yaml, tensorboard/
    <run_dir>/generate/sweep-<time>/threshold=0.7/
    <run_dir>/generate/sweep-<time>/sweep.jsonl      one line per generation: settings and results

Values are swept with Hydra's override grammar (``a=1,2,3``, ``a=range(1,4)``, ``a=choice(x,y)``);
several swept keys give their Cartesian product. The checkpoint is loaded once. Every combination
is checked before the first runs (a bad value wastes no generation); each then runs as checked,
drawing its held-out samples once.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from xdllm.config.compose import compose_config, first_swept_override
from xdllm.errors import XdllmError
from xdllm.run.checkpoint import load_trained
from xdllm.run.generate import check_generation, run_generation
from xdllm.run.generation_folder import discard_unfinished, generation_content_in, make_output_dir, stopped_hint
from xdllm.run.generation_record import settings_name
from xdllm.temporary_files import write_jsonl_atomically

SWEEP_SUMMARY = "sweep.jsonl"


def _display_key(key: str) -> str:
    return key.removeprefix("predictor.")


def refuse_sweep_without_multirun(overrides: Sequence[str]) -> None:
    """``KEY=A,B`` without ``-m`` would be one run given a list: say how to sweep instead."""
    swept = first_swept_override(overrides)
    if swept is not None:
        raise XdllmError(f"{swept.input_line} gives several values: add -m to run one generation "
                         "per value (quote a single value that contains a comma)")


def sweep_combinations(overrides: Sequence[str]) -> tuple[list[str], list[dict[str, str]]]:
    """The fixed overrides, and one ``{key: value}`` per combination of the swept ones."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as error:
        raise XdllmError(f"invalid override: {str(error).splitlines()[0]}") from error
    fixed = [override.input_line for override in parsed if not override.is_sweep_override()]
    swept = [override for override in parsed if override.is_sweep_override()]
    if not swept:
        raise XdllmError("-m (sweep) needs at least one swept option, e.g. predictor.threshold=0.5,0.7,0.9")
    for override in swept:
        if override.key_or_group in ("ckpt", "output_dir", "ema"):
            raise XdllmError(f"{override.key_or_group} cannot be swept: a sweep runs one checkpoint's weights "
                             "into one folder")
    keys = [override.get_key_element() for override in swept]
    values = [list(override.sweep_string_iterator()) for override in swept]
    return fixed, [dict(zip(keys, combination)) for combination in itertools.product(*values)]


def _sweep_dir(requested: str | None, run_dir: Path) -> tuple[Path, Path | None]:
    """The sweep's folder, and the outermost folder made for it (None if it existed)."""
    if requested:
        folder = Path(requested).expanduser()
        return folder, make_output_dir(folder)
    folder = run_dir / "generate" / f"sweep-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=False)
    return folder, folder


def sweep_configs(overrides: Sequence[str]) -> tuple[list[dict[str, str]], list[DictConfig]]:
    """Each combination and its composed ``generate`` config (all checked before any runs)."""
    fixed, combinations = sweep_combinations(overrides)
    return combinations, [compose_config("generate", [*fixed, *(f"{k}={v}" for k, v in combination.items())])
                          for combination in combinations]


def run_sweep(overrides: Sequence[str]) -> dict[str, Any]:
    """Generate once per combination; return the sweep folder and each generation's results."""
    combinations, configs = sweep_configs(overrides)
    if OmegaConf.is_missing(configs[0], "ckpt"):
        raise XdllmError("ckpt=<checkpoint file or run directory> is required")
    run = load_trained(configs[0].ckpt, ema=configs[0].ema)
    # a bad value is refused before the first generation runs; each runs as checked (its
    # held-out samples drawn once, when it runs)
    generations = [check_generation(run, config) for config in configs]
    sweep_dir, made = _sweep_dir(configs[0].output_dir, run.run_dir)
    names = [settings_name({_display_key(k): v for k, v in combination.items()})
             for combination in combinations]
    for name in names:
        held = generation_content_in(sweep_dir / name)
        if held:
            raise XdllmError(f"{sweep_dir / name} already holds {', '.join(held)}; choose another output_dir"
                             f"{stopped_hint(sweep_dir / name)}")
    path = sweep_dir / SWEEP_SUMMARY
    results: list[dict[str, Any]] = []
    try:
        for combination, name, generation in zip(combinations, names, generations):
            generation.options.output_dir = str(sweep_dir / name)
            settings = {key: OmegaConf.select(generation.options, key.lstrip("+~")) for key in combination}
            outside_predictor = {key.lstrip("+~"): value for key, value in settings.items()
                                 if not key.lstrip("+~").startswith("predictor.")}
            summary = run_generation(run, generation, swept=outside_predictor)
            results.append({"settings": settings, "folder": name, **summary})
            write_jsonl_atomically(path, results)  # after each, so a failed sweep keeps what finished
    except BaseException:
        if made is not None and not results:
            discard_unfinished(sweep_dir, made)
        raise
    return {"sweep": str(sweep_dir), "summary": str(path), "runs": results}

