"""What a generation folder says about itself: its settings in its name, its resolved config in
``generate.yaml``, its results as TensorBoard scalars.

A folder named by its settings (``<time>_threshold=0.9``, or ``threshold=0.9`` inside a sweep)
shows up under that name in TensorBoard; its scalars (``generate/exact_match``,
``generate/token_accuracy``, ``generate/tokens_per_second``, ``generate/mean_steps`` = forward
passes per sample, ...) are logged at the checkpoint's training step, and its settings and
results also go to TensorBoard's HParams dashboard, whose scatter plots set accuracy against
forward passes over every generation of a run.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from xdllm.config.flat_keys import flat_keys
from xdllm.errors import XdllmError
from xdllm.event_files import event_writer
from xdllm.folder_names import GENERATE_CONFIG
from xdllm.temporary_files import write_text_atomically

SCALAR_PREFIX = "generate/"
BY_FORWARD_PASSES = "generate_by_forward_passes/"


def show_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def generation_settings(options: DictConfig) -> dict[str, Any]:
    """What a generation set beyond the run's own predictor: its predictor overrides, flat, and
    ``ema=false`` where it asked for the trained weights instead of their average."""
    settings = flat_keys(OmegaConf.to_container(options.predictor, resolve=True))
    return settings if options.get("ema", True) else {"ema": False, **settings}


MAX_SETTINGS_NAME_BYTES = 180
"""The longest settings name kept whole: a folder name holds at most 255 bytes, and a run's
folder may get a suffix (``-2``, ``.moved-<time>``, ``.abandoned-after-step<S>-<time>``)."""


def settings_name(settings: Mapping[str, Any]) -> str:
    """``threshold=0.5,temperature=0``: a folder name that says what was set (a path separator
    in a value becomes ``_``; the exact values are in generate.yaml). A name longer than
    :data:`MAX_SETTINGS_NAME_BYTES` is cut, and ends in ``...`` and a digest of the whole, so that
    settings that differ only past the cut get folders of their own."""
    parts = [f"{key}={show_value(value)}" for key, value in settings.items()]
    name = ",".join(parts).replace(os.sep, "_")
    encoded = name.encode()
    if len(encoded) <= MAX_SETTINGS_NAME_BYTES:
        return name
    digest = hashlib.sha256(encoded).hexdigest()[:10]
    return f"{encoded[:MAX_SETTINGS_NAME_BYTES - 13].decode(errors='ignore')}...{digest}"


def predictor_config(run_config: DictConfig, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The predictor a generation runs: the run's predictor config with the overrides merged."""
    return OmegaConf.to_container(OmegaConf.merge(run_config.predictor, overrides), resolve=True)


def resolved_options(options: DictConfig, run_config: DictConfig) -> dict[str, Any]:
    """The options with ``predictor`` resolved over the run's and the overrides as
    ``predictor_overrides``."""
    record = OmegaConf.to_container(options, resolve=True)
    record["predictor_overrides"] = record["predictor"]
    record["predictor"] = predictor_config(run_config, options.predictor)
    return record


def write_generation_config(folder: Path, options: DictConfig, run_config: DictConfig,
                            checkpoint: Path, global_step: int, prompts_sha256: str | None = None) -> Path:
    """``generate.yaml``: the options as given (``predictor_overrides``), the predictor they
    resolve to, the checkpoint (file and training step), and for a ``prompts_file`` the SHA-256
    of the prompts read (``prompts_sha256``)."""
    record = resolved_options(options, run_config)
    record.update(checkpoint=str(checkpoint), global_step=global_step)
    if prompts_sha256 is not None:
        record["prompts_sha256"] = prompts_sha256
    path = folder / GENERATE_CONFIG
    write_text_atomically(path, OmegaConf.to_yaml(OmegaConf.create(record)))
    return path


def read_record(path: Path, required: Sequence[str]) -> DictConfig:
    """A YAML record xdllm wrote (``generate.yaml``, ``sweep.yaml``), refused in one line naming
    the file when it cannot be parsed or lacks one of the ``required`` keys."""
    try:
        record = OmegaConf.load(path)
    except (OSError, yaml.YAMLError, OmegaConfBaseException) as error:
        raise XdllmError(f"{path} cannot be read ({str(error).splitlines()[0]}): it was edited or not written "
                         "by xdllm") from error
    if path.stat().st_size == 0:  # a generation claims its folder by creating its generate.yaml empty
        raise XdllmError(f"{path} is empty: the generation that claimed {path.parent} was stopped before it wrote "
                         f"anything; there is nothing to continue: move {path.parent} away and start a new one")
    missing = [key for key in required if not isinstance(record, DictConfig) or key not in record]
    if missing:
        raise XdllmError(f"{path} lacks {', '.join(missing)}: it was edited or not written by xdllm")
    return record


def parse_record_json(text: str, where: Path | str) -> Any:
    """JSON xdllm wrote (a partial generation's state, a line of ``sweep.jsonl``, ...), refused in
    one line naming ``where`` (a file, or ``file:line``) when it does not parse."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise XdllmError(f"{where} is not JSON ({error}): it was edited or not written by xdllm") from error


def scalar_results(summary: Mapping[str, Any]) -> dict[str, float]:
    """Every numeric entry of a generation summary, as ``generate/<name>``."""
    return {f"{SCALAR_PREFIX}{name}": float(value) for name, value in summary.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


def write_scalars(tensorboard_dir: Path, scalars: Mapping[str, float], step: int) -> None:
    """``scalars`` (``{tag: value}``) at ``step``, in a new event file of ``tensorboard_dir``."""
    with event_writer(tensorboard_dir) as writer:
        for tag, value in scalars.items():
            writer.add_scalar(tag, value, step)


def write_generation_scalars(tensorboard_dir: Path, summary: Mapping[str, Any], global_step: int,
                             settings: Mapping[str, Any]) -> dict[str, float]:
    """The summary's numbers as scalars at ``global_step``; each again at step = forward passes
    per sample (rounded) under ``generate_by_forward_passes/``, so a sweep's folders overlay as
    accuracy against forward passes; and the settings with the results for HParams."""
    from torch.utils.tensorboard.summary import hparams

    scalars = scalar_results(summary)
    passes = round(summary["mean_steps"])
    hparam_values = {key: value if isinstance(value, (int, float, str, bool)) else show_value(value)
                     for key, value in settings.items()}
    with event_writer(tensorboard_dir) as writer:
        for tag, value in scalars.items():
            writer.add_scalar(tag, value, global_step)
            if tag not in (f"{SCALAR_PREFIX}mean_steps", f"{SCALAR_PREFIX}num_samples"):
                writer.add_scalar(BY_FORWARD_PASSES + tag.removeprefix(SCALAR_PREFIX), value, passes)
        experiment, start, end = hparams({"global_step": global_step, **hparam_values}, scalars)
        for record in (experiment, start, end):
            writer.file_writer.add_summary(record, global_step)
    return scalars
