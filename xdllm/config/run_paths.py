"""The paths a training run is given, made absolute once, when training starts.

A relative path means the directory of the ``xdllm train`` call. The run records the absolute
form (``config.yaml``, the checkpoint's config, ``overrides.yaml``), so ``generate``, ``eval`` and
``resume=`` work from any directory. The path-valued keys: ``tokenizer`` (unless ``builtin``), ``init_from``, ``judge``,
``validation_choices``,
the task's ``params`` named ``path`` or ``*_path``, ``*_file``, ``*_dir``, every ``frozen.*`` model,
the keys of the family's components (``model``, ``collator.*``, ``loss``, ``predictor``,
``evaluator``, nested nodes included) with those names or the name of a frozen model of the run
(dflash's ``model.target``: the checkpoint of ``frozen.target``), and every ``model_search_path``
entry. Interpolations (``${frozen.target}``) are left as they are: they follow the key they read.
``model_search_path`` also gets the folder the run's family was found in (through
``$XDLLM_MODEL_PATH``), so the run needs the variable no more.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from xdllm.config.override_text import override_value
from xdllm.registry import discover_families

BUILTIN_TOKENIZER = "builtin"
PATH_NAMES = re.compile(r"path|.*_(path|file|dir)")
"""Keys of task params and family components that hold paths."""
COMPONENT_NODES = ("model", "collator", "loss", "predictor", "evaluator")
RUN_PATH_KEYS = ("init_from", "judge", "validation_choices")
"""Top-level train options that name a file or folder (beside ``tokenizer``)."""


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _set_strings(config: DictConfig, node: str, is_path_key: Callable[[str], bool]) -> dict[str, str]:
    """The non-empty strings under ``node`` (nested nodes included) whose key ``is_path_key``,
    by dotted key. Interpolations are left out: they follow the key they read."""
    params = OmegaConf.select(config, node)
    if not isinstance(params, DictConfig):
        return {}
    found: dict[str, str] = {}
    for name in params:
        if OmegaConf.is_missing(params, name) or OmegaConf.is_interpolation(params, name):
            continue
        value = params[name]
        if isinstance(value, DictConfig):
            found.update(_set_strings(config, f"{node}.{name}", is_path_key))
        elif isinstance(value, str) and value and is_path_key(str(name)):
            found[f"{node}.{name}"] = value
    return found


def _path_values(config: DictConfig) -> dict[str, str]:
    """The set path-valued keys (dotted) of a composed train config and their values."""
    values = {"tokenizer": config.tokenizer} if config.tokenizer != BUILTIN_TOKENIZER else {}
    for key in RUN_PATH_KEYS:
        if isinstance(config.get(key), str) and config[key]:
            values[key] = config[key]
    values.update(_set_strings(config, "task.params", PATH_NAMES.fullmatch))
    frozen = _set_strings(config, "frozen", lambda name: True)
    values.update(frozen)
    frozen_names = {key.removeprefix("frozen.") for key in frozen}
    for node in COMPONENT_NODES:  # a component's own path, or its frozen model's checkpoint given straight
        values.update(_set_strings(config, node, lambda name: bool(PATH_NAMES.fullmatch(name)) or name in frozen_names))
    return values


def frozen_checkpoint_keys(config: DictConfig, name: str) -> list[str]:
    """The component keys (dotted) that give frozen model ``name``'s checkpoint straight, as
    dflash's ``model.target`` does: set strings under a component node, keyed by that name."""
    return [key for node in COMPONENT_NODES for key in _set_strings(config, node, lambda key: key == name)]


def _search_path(config: DictConfig) -> list[str]:
    """``model_search_path`` made absolute, with the folder the run's family came from."""
    given = config.model_search_path
    folders = [str(Path(folder).expanduser().resolve()) for folder in ([given] if isinstance(given, str) else given)]
    registered = discover_families(folders).get(config.get("model_family"))
    if registered is not None and registered.folder is not None:
        folders.append(str(registered.folder))
    return list(dict.fromkeys(folders))


GENERATE_PATH_KEYS = ("prompts_file", "data_path")
"""``generate`` and ``eval`` options that name a file or folder (so does each ``frozen.<name>``),
made absolute from the command's directory, so that ``generate.yaml`` and ``sweep.yaml`` record
them for a ``resume=`` from anywhere (``ckpt`` and ``output_dir`` are recorded as the paths they
resolve to)."""


def absolute_generate_paths(overrides: Sequence[str]) -> list[str]:
    """``overrides`` with each :data:`GENERATE_PATH_KEYS` (or ``frozen.<name>``) value that is one
    path made absolute."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    absolute = []
    for text in overrides:
        plus, key = re.match(r"(\+*)([^=]*)", text).groups()
        if (key in GENERATE_PATH_KEYS or key.startswith("frozen.")) and "=" in text:
            value = parser.parse_override(text).value()
            if isinstance(value, str) and value:
                text = f"{plus}{key}={override_value(_absolute(value))}"
        absolute.append(text)
    return absolute


def record_absolute_paths(config: DictConfig, overrides: Sequence[str]) -> list[str]:
    """Make ``config``'s relative paths absolute (in place) and return ``overrides`` saying the
    same: each path override with its absolute value, and ``KEY=<absolute path>`` added for a
    relative path a config file gave (an experiment's data, say) and for the family's folder."""
    changes: dict[str, Any] = {key: _absolute(value) for key, value in _path_values(config).items()
                               if _absolute(value) != value}
    search_path = _search_path(config)
    if search_path != config.model_search_path:
        changes["model_search_path"] = search_path
    with open_dict(config):
        for key, value in changes.items():
            OmegaConf.update(config, key, value, merge=False)
    stored, given = [], set()
    for override in overrides:
        plus, key = re.match(r"(\+*)([^=]*)", override).groups()
        if key in changes:
            given.add(key)
            override = f"{plus}{key}={override_value(changes[key])}"
        stored.append(override)
    return [*stored, *(f"{key}={override_value(value)}" for key, value in changes.items() if key not in given)]


COMMAND_PATH_KEYS = ("ckpt", "output_dir", "run_dir", "tokenizer", *RUN_PATH_KEYS, *GENERATE_PATH_KEYS)


def is_path_key(key: str) -> bool:
    """Whether override key ``key`` (dotted, without ``+``) names a file or folder: the keys this
    module makes absolute, and those the commands resolve themselves (``ckpt``, ``output_dir``,
    ``run_dir``)."""
    node, _, name = key.rpartition(".")
    return (key in COMMAND_PATH_KEYS or node == "frozen"
            or (node.split(".")[0] in ("task", *COMPONENT_NODES) and bool(PATH_NAMES.fullmatch(name))))


def quoted_paths(overrides: Sequence[str]) -> list[str]:
    """``overrides`` with each path value that holds ``=`` quoted: a training sweep's run folders
    are named by their settings (``runs/lr/optim.lr=0.001,seed=0``), which Hydra cannot read
    bare, and no value with ``=`` in it means anything else to Hydra unquoted."""
    quoted = []
    for text in overrides:
        key, equals, value = text.partition("=")
        if equals and "=" in value and value[0] not in "'\"[{" and is_path_key(key.lstrip("+")):
            text = f"{key}={override_value(value)}"
        quoted.append(text)
    return quoted
