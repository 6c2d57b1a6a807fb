"""Hydra composition with the model-family packages on the search path."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from xdllm.config.components import check_component_keys, refuses_argument
from xdllm.config.flat_keys import flat_keys
from xdllm.config.override_text import check_override_syntax
from xdllm.config.schema import (
    COMPONENT_NODES,
    check_new_keys,
    check_values,
    override_key,
    unknown_key_message,
)
from xdllm.errors import XdllmError
from xdllm.registry import RegisteredFamily, discover_families, unfound_family_hint

PACKAGE_DIR = Path(__file__).resolve().parents[1]
WHEEL_REPOSITORY_FILES = PACKAGE_DIR / "repository_files"
REPOSITORY = WHEEL_REPOSITORY_FILES if WHEEL_REPOSITORY_FILES.is_dir() else PACKAGE_DIR.parent
"""Where the repository files read at run time (``configs/``, ``experiments/data/``) are: the
source tree beside ``xdllm/`` for an editable install (``make setup``), or the copy a built wheel
(``pip install .``) carries under ``xdllm/repository_files/`` (``pyproject.toml`` maps them there)."""
ROOT_CONFIG_DIR = REPOSITORY / "configs"
SEARCH_PATH_KEY = "model_search_path"


def in_repository(relative: str) -> str:
    """``${xdllm_repo:experiments/data/stories.txt}``: a file shipped with xdllm, by its path in
    the repository, so that a shipped experiment's data is found from any working directory (a
    relative path in a config means the directory of the ``xdllm`` call)."""
    return str(REPOSITORY / relative)


def first_set(value: object, default: object) -> object:
    """``${xdllm_or:${mdlm.target_length},${derived.max_new_tokens}}``: ``value`` unless it is
    null, else ``default`` (a generation canvas as long as the training canvas, when one was set)."""
    return default if value is None else value


OmegaConf.register_new_resolver("xdllm_repo", in_repository, replace=True)
OmegaConf.register_new_resolver("xdllm_or", first_set, replace=True)


def search_path_override(overrides: Sequence[str]) -> list[str]:
    """The ``model_search_path=[...]`` override, read before composition (it decides what can
    be composed); the last one when given more than once, as Hydra keeps it (``resume=`` puts
    the run's stored overrides before the command's)."""
    for override in reversed(overrides):
        key, _, value = override.partition("=")
        if key.lstrip("+") == SEARCH_PATH_KEY:
            parsed = OmegaConf.from_dotlist([f"value={value}"]).value
            return [parsed] if isinstance(parsed, str) else [str(p) for p in parsed]
    return []


def first_swept_override(overrides: Sequence[str]) -> Override | None:
    """The first override giving several values (Hydra's ``KEY=A,B``), if any; None too for
    malformed overrides, which composing reports."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return None
    return next((override for override in parsed if override.is_sweep_override()), None)


def config_dirs(families: dict[str, RegisteredFamily]) -> list[Path]:
    return [ROOT_CONFIG_DIR] + [f.family.config_dir for f in families.values()]


def group_options(families: dict[str, RegisteredFamily]) -> dict[str, list[str]]:
    """Every config group and its options, over the root configs and all family packages."""
    groups: dict[str, set[str]] = {}
    for directory in config_dirs(families):
        for group_dir in sorted(p for p in directory.iterdir() if p.is_dir()):
            groups.setdefault(group_dir.name, set()).update(
                p.stem for p in group_dir.glob("*.yaml"))
    return {name: sorted(options) for name, options in sorted(groups.items())}


def optional_groups() -> list[str]:
    """The groups ``train.yaml``'s defaults list leaves unset (``collator: null``): those ``~GROUP``
    may remove again (``~collator`` after an experiment's packed collator: the family's own)."""
    defaults = yaml.safe_load((ROOT_CONFIG_DIR / "train.yaml").read_text(encoding="utf-8"))["defaults"]
    return [group for entry in defaults if isinstance(entry, dict) for group, option in entry.items() if option is None]


def check_group_choices(overrides: Sequence[str], options: dict[str, list[str]]) -> None:
    """``GROUP=OPTION`` for any config group must name an existing option, and ``~GROUP`` only an
    optional group. Hydra would say so in a message of many lines that ends with its whole search
    path, or in a traceback (``GROUP=null``)."""
    optional = optional_groups()
    for override in overrides:
        group, value = override_key(override), override.partition("=")[2]
        if group not in options:
            continue
        available = ", ".join(options[group])
        if override.startswith("~") and group not in optional:
            raise XdllmError(f"{override}: a run needs a {group}: choose one of {available}")
        if value == "null":
            removes = f"; ~{group} removes it" if group in optional else ""
            raise XdllmError(f"{group}=null: a config group takes one of its options, not null: {available}{removes}")
        if not override.startswith("~") and value not in options[group]:
            hint = unfound_family_hint(value) if group == "model" else ""
            raise XdllmError(f"unknown {group} '{value}'; available: {available}{hint}")


def _open_merged_overrides(overrides: Sequence[str]) -> list[str]:
    """``generate`` merges ``predictor.*`` (and ``eval`` ``evaluator.*``) over the run's own
    config, so any key may be given there: ``predictor.threshold=0.9`` means
    ``+predictor.threshold=0.9``."""
    return [f"+{o}" if o.startswith(("predictor.", "evaluator.")) else o for o in overrides]


def compose_config(config_name: str, overrides: Sequence[str]) -> DictConfig:
    """Compose ``configs/<config_name>.yaml`` with ``overrides``; errors become XdllmError."""
    check_override_syntax(overrides, config_name)
    if config_name == "generate":
        overrides = _open_merged_overrides(overrides)
    families = discover_families(search_path_override(overrides))
    if config_name == "train":
        check_group_choices(overrides, group_options(families))
    check_new_keys(overrides, config_name)
    search_path = ",".join(f"file://{d}" for d in config_dirs(families)[1:])
    try:
        config = _compose(config_name, overrides, search_path)
    except (HydraException, OmegaConfBaseException) as error:
        missing = re.match(r"Could not override '(.+?)'", str(error))
        if missing and isinstance(error.__cause__, (ConfigAttributeError, ConfigKeyError)):
            without = _composed_without(config_name, overrides, search_path, missing[1])
            raise XdllmError(_unknown_key_line(missing[1], config_name, without, families)) from error
        message = str(error).strip().splitlines()[0]
        raise XdllmError(f"invalid configuration or override: {message}") from error
    except yaml.MarkedYAMLError as error:
        raise XdllmError(yaml_error_line(error)) from error
    check_values(config, config_name)
    check_component_keys(config)
    return config


def _compose(config_name: str, overrides: Sequence[str], search_path: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(ROOT_CONFIG_DIR), version_base="1.3"):
        return compose(config_name=config_name, overrides=[*overrides, f"hydra.searchpath=[{search_path}]"])


def _composed_without(config_name: str, overrides: Sequence[str], search_path: str, unknown: str) -> DictConfig | None:
    """The config composed without the override of ``unknown`` (None where that fails too)."""
    others = [o for o in overrides if override_key(o) != unknown]
    try:
        return _compose(config_name, others, search_path)
    except (HydraException, OmegaConfBaseException):
        return None


def _keys_at(config: DictConfig | None, node: str) -> list[str]:
    found = OmegaConf.select(config, node) if node and config is not None else config
    return [str(k) for k in found] if isinstance(found, DictConfig) else []


def _unknown_key_line(unknown: str, config_name: str, without: DictConfig | None,
                      families: dict[str, RegisteredFamily]) -> str:
    """An override of a key the config lacks: another model family's option (``mlm.target_length``
    in a run of family mdlm) is said to be one, with this family's own; otherwise the key's node's
    keys (what a typo was probably meant to be)."""
    top = unknown.split(".")[0]
    family = without.get("model_family") if without is not None else None
    if top in families and family is not None and family != top:
        own = _keys_at(without, family)
        listed = f"; its own are {family}.*: {', '.join(own)}" if own else ""
        return (f"unknown key {unknown!r}: {top}.* are options of model family {top}, and this run's family is "
                f"{family}{listed} (model={top} chooses family {top})")
    node, _, leaf = unknown.rpartition(".")
    target = OmegaConf.select(without, f"{node}._target_") if without is not None and node in COMPONENT_NODES else None
    refused_by = target if isinstance(target, str) and refuses_argument(target, leaf) else None
    return unknown_key_message(unknown, config_name, present=_keys_at(without, node), refused_by=refused_by,
                               elsewhere=[*_leaf_keys(without), *_predictor_keys(config_name)])


def _leaf_keys(config: DictConfig | None) -> list[str]:
    return list(flat_keys(OmegaConf.to_container(config, resolve=False))) if config is not None else []


def _predictor_keys(config_name: str) -> list[str]:
    """For ``generate``: ``predictor.<argument>`` for the arguments of the unmasking predictors
    (``seed=1`` means ``predictor.seed=1`` there), which the run's own predictor takes over."""
    if config_name != "generate":
        return []
    import inspect

    from xdllm.predict.engine import UnmaskingPredictor

    built = {"self", "model", "tokenizer"}  # given by the run, not by an option
    return [f"predictor.{name}" for name in inspect.signature(UnmaskingPredictor.__init__).parameters
            if name not in built]


def yaml_error_line(error: yaml.MarkedYAMLError) -> str:
    """A YAML syntax error in one line: the file, where, and what the parser expected."""
    mark = error.problem_mark or error.context_mark
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark else "a config file"
    context = error.context or ""
    if context and error.context_mark and error.context_mark is not mark:
        context += f" from line {error.context_mark.line + 1}, column {error.context_mark.column + 1}"
    problem = error.problem or "syntax error"
    return f"invalid YAML in {where}: {problem}" + (f" ({context})" if context else "")
