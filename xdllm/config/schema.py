"""What every configuration value may be, checked right after composition, before anything runs.

Three layers:

- **The root configs' own keys** (``SCHEMAS``): a type, and a range or a set of choices, per key.
  A wrong value is one error naming the key, the value and what is allowed.
- **New keys** (``+key=value``) are accepted only where a group takes extras: ``trainer`` (any
  Lightning Trainer argument), ``frozen`` (named models) and the family's component nodes, whose
  constructors decide. Elsewhere a new key is a typo, and is refused with the known keys named.
- **Family component nodes** (``model``, ``loss``, ``predictor``, ``evaluator``, ``collator.*``):
  every key must be a parameter of the ``_target_``'s signature, with a value of its annotated
  type (ints, floats, bools, strings, their optional forms and literals).
"""

from __future__ import annotations

import difflib
import inspect
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hydra._internal.utils import _locate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException

from xdllm.errors import XdllmError
from xdllm.train.optim import SCHEDULES


@dataclass(frozen=True)
class Rule:
    """Allowed values of one key: types, inclusive ``low``/``high`` or exclusive ``above``/``below``
    bounds, or ``choices``; ``nullable`` admits null."""

    types: tuple[type, ...]
    low: int | float | None = None
    above: int | float | None = None
    high: int | float | None = None
    below: int | float | None = None
    choices: tuple[Any, ...] | None = None
    nullable: bool = False

    def describe(self) -> str:
        if self.choices is not None:
            allowed = " or ".join(str(choice) for choice in self.choices)
        else:
            allowed = " or ".join(_TYPE_WORDS.get(t, "a number" if t is float else t.__name__)
                                  for t in self.types if not (t is int and float in self.types))
            bounds = [f"{sign} {bound:g}" for sign, bound in
                      ((">=", self.low), (">", self.above), ("<=", self.high), ("<", self.below)) if bound is not None]
            if bounds:
                allowed += " " + " and ".join(bounds)
        return allowed + (" (or null)" if self.nullable else "")

    def allows(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if isinstance(value, bool) and bool not in self.types:
            return False
        if not isinstance(value, self.types):
            return False
        if self.choices is not None:
            return value in self.choices
        if self.low is not None and value < self.low:
            return False
        if self.above is not None and value <= self.above:
            return False
        if self.below is not None and value >= self.below:
            return False
        return self.high is None or value <= self.high


_TYPE_WORDS = {int: "a whole number", str: "a string", bool: "true or false", list: "a list"}

WHOLE, POSITIVE, COUNT = Rule((int,), low=0), Rule((int,), low=1), Rule((int,), low=0)
NUMBER = (float, int)
FLAG = Rule((bool,))

SCHEMAS: dict[str, dict[str, Rule]] = {
    "train": {
        "seed": WHOLE,
        "torch_threads": Rule((int,), low=1, nullable=True),
        "run_dir": Rule((str,), nullable=True),
        "existing_run_dir": Rule((str,), choices=("refuse", "move_aside")),
        "tokenizer": Rule((str,)),
        "init_from": Rule((str,), nullable=True),
        "generate_after_train": FLAG,
        "text_samples_after_train": COUNT,
        "text_samples_temperature": Rule(NUMBER, low=0, nullable=True),
        "progress": Rule((str,), choices=("auto", "bar", "lines")),
        "trainer.log_every_n_steps": POSITIVE,  # before progress_every_n_steps, which defaults to it
        "progress_every_n_steps": POSITIVE,
        "trainer.max_steps": POSITIVE,
        "trainer.val_check_interval": POSITIVE,
        "trainer.devices": Rule((int, str, list)),
        "trainer.accelerator": Rule((str,), choices=("cpu", "gpu", "cuda", "auto")),
        "trainer.precision": Rule((str, int)),
        "trainer.enable_progress_bar": FLAG,
        "trainer.enable_model_summary": FLAG,
        "data.batch_size": POSITIVE,
        "data.eval_batch_size": POSITIVE,
        "data.num_val_samples": POSITIVE,
        "data.num_test_samples": COUNT,
        "data.num_workers": COUNT,
        "data.validation_roles": Rule((list,), nullable=True),
        "optim.lr": Rule(NUMBER, above=0),
        "optim.weight_decay": Rule(NUMBER, low=0),
        "optim.beta1": Rule(NUMBER, low=0, high=0.999999),
        "optim.beta2": Rule(NUMBER, low=0, high=0.999999),
        "optim.eps": Rule(NUMBER, above=0),
        "optim.warmup_steps": COUNT,
        "optim.min_lr_ratio": Rule(NUMBER, low=0, high=1),
        "optim.schedule": Rule((str,), choices=SCHEDULES),
        "optim.decay_fraction": Rule(NUMBER, above=0, high=1),
        "optim.gradient_clip_val": Rule(NUMBER, low=0, nullable=True),
        "optim.accumulate_grad_batches": POSITIVE,
        "optim.fused": Rule((bool,), nullable=True),
        "optim.ema_decay": Rule(NUMBER, low=0, below=1, nullable=True),
        "checkpoint.last_every_n_steps": POSITIVE,
        "checkpoint.save_every_n_steps": Rule((int,), low=1, nullable=True),
        "checkpoint.monitor": Rule((str,), nullable=True),
        "checkpoint.mode": Rule((str,), choices=("max", "min"), nullable=True),
        "history.num_samples": COUNT,
        "history.k": POSITIVE,
        "judge": Rule((str,), nullable=True),
    },
    "generate": {
        "ckpt": Rule((str,), nullable=True),  # null: not given (required, checked when it runs)
        "device": Rule((str,)),  # its choices are checked when it runs
        "split": Rule((str,), choices=("test", "validation")),
        "prompts_file": Rule((str,), nullable=True),
        "data_path": Rule((str,), nullable=True),
        "num_samples": Rule((int,), low=1, nullable=True),
        "batch_size": POSITIVE,
        "output_dir": Rule((str,), nullable=True),
        "history": Rule((str,), choices=("topk",), nullable=True),
        "history_k": POSITIVE,
        "history_tensorboard_samples": COUNT,
        "live": FLAG,
        "ema": FLAG,
        "judge": Rule((str,), nullable=True),
    },
}

OPEN_NODES = {"train": ("trainer", "frozen", "model", "collator", "loss", "predictor", "evaluator"),
              "generate": ("predictor", "frozen")}
"""Where ``+key=value`` may add a key: the nodes whose consumer takes arbitrary arguments."""

COMPONENT_NODES = ("model", "loss", "predictor", "evaluator", "collator.train", "collator.val",
                   "collator.prediction")


def override_key(override: str) -> str:
    """The config key a Hydra override names: ``a.b`` for ``a.b=1``, ``+a.b=1``, ``++a.b=1`` and ``~a.b``."""
    return override.partition("=")[0].lstrip("+~")


def check_new_keys(overrides: Sequence[str], config_name: str) -> None:
    """Refuse ``+key=value`` outside the nodes that take extras, naming what exists there."""
    for override in overrides:
        if not override.startswith("+"):
            continue
        key = override_key(override)
        if key.split(".")[0] not in OPEN_NODES.get(config_name, ()):
            raise XdllmError(unknown_key_message(key, config_name, f" in {override!r}"))


GENERATE_OWN_OPTIONS = ("; generate sets what it generates with its own options: num_samples= (how many "
                        "samples), batch_size= (prompts per predictor call), split=")


def did_you_mean(name: str, names: Sequence[str], prefix: str) -> str:
    """`` (did you mean <prefix><closest>?)`` for the name in ``names`` closest to a mistyped
    ``name``, or nothing when none is close."""
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def unknown_key_message(key: str, config_name: str, where_given: str = "", present: Sequence[str] = (),
                        refused_by: str | None = None) -> str:
    """A key the config does not have, a close match (a typo's fix), the keys known there (the
    schema's and ``present``: those the composed config has at the key's node), and what to give
    instead: ``+key=value`` where its node takes new keys, unless the node's component
    (``refused_by``, its ``_target_``) takes no such argument (and, for ``generate``'s ``data.*``,
    generate's own options)."""
    open_nodes = OPEN_NODES.get(config_name, ())
    top = key.split(".")[0]
    node, _, leaf = key.rpartition(".")
    prefix = f"{node}." if node else ""
    known = sorted({k[len(prefix):].split(".")[0] for k in SCHEMAS.get(config_name, {}) if k.startswith(prefix)}
                   | set(() if node else open_nodes) | {k for k in present if not k.startswith("_")})
    unknown = f"unknown key {key!r}{where_given}{did_you_mean(leaf, known, prefix)}"
    hint = f"; known keys there: {', '.join(known)}" if known else ""
    if top in open_nodes and refused_by is not None:
        return f"{unknown}: {node} does not list it{hint}; {refused_by} takes no argument {leaf!r}"
    if top in open_nodes:
        return f"{unknown}: {node} does not list it{hint}; {top} takes new keys: add one with +{key}=VALUE"
    where = f"{node} has" if node else "the config has"
    own = GENERATE_OWN_OPTIONS if config_name == "generate" and top == "data" else ""
    return f"{unknown}: {where} no such key and takes no new ones{hint}{own}"


def check_values(config: DictConfig, config_name: str) -> None:
    """Every key of the root schema against its rule."""
    for key, rule in SCHEMAS.get(config_name, {}).items():
        value = OmegaConf.select(config, key, throw_on_missing=False)
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
        if not rule.allows(value):
            quote = _quote_hint(key, value) if rule.types == (str,) else ""
            raise XdllmError(f"{key}={value!r} is not allowed: {key} must be {rule.describe()}{quote}")
    if "frozen" in config:
        _check_frozen(config.frozen)
    roles = OmegaConf.select(config, "data.validation_roles", throw_on_missing=False)
    if roles is not None and (not roles or len(set(roles)) != len(roles)
                              or not set(roles) <= {"loss", "prediction"}):
        raise XdllmError(f"data.validation_roles={list(roles)} is not allowed: it must list loss and/or "
                         "prediction, each once")


def _quote_hint(key: str, value: Any) -> str:
    """For a string option Hydra read as a number or true/false: how to give it as a string."""
    if not isinstance(value, (int, float, bool)):
        return ""
    return (f"; Hydra read the value as {'true/false' if isinstance(value, bool) else 'a number'}: for a string, "
            f"quote it as typed, e.g. {key}='{str(value).lower() if isinstance(value, bool) else value}'")


def _check_frozen(frozen: Any) -> None:
    """``frozen``: names mapped to checkpoint files or run directories (null: none)."""
    if frozen is None:
        return
    if not isinstance(frozen, DictConfig):
        raise XdllmError(f"frozen={frozen!r} is not allowed: frozen maps names to run directories or checkpoints, "
                         "one per name: frozen.NAME=<path> (+frozen.NAME=<path> for a name it has not)")
    for name in frozen:
        value = OmegaConf.select(frozen, str(name), throw_on_missing=False)
        if not isinstance(value, str) and value is not None:
            shown = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
            raise XdllmError(f"frozen.{name}={shown!r} is not allowed: frozen.{name} must be a string (a run "
                             f"directory or checkpoint){_quote_hint(f'frozen.{name}', value)}")


def _annotation_rule(annotation: Any) -> tuple[tuple[type, ...], tuple[Any, ...] | None, bool] | None:
    """``(types, choices, nullable)`` for annotations simple enough to check, else None."""
    simple = (int, float, bool, str)
    if annotation in simple:
        return (annotation, int) if annotation is float else (annotation,), None, False
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return tuple({type(a) for a in args}), args, False
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        nullable = len(members) < len(args)
        rules = [_annotation_rule(member) for member in members]
        if any(rule is None or rule[1] is not None for rule in rules):
            return None
        return tuple(t for rule in rules for t in rule[0]), None, nullable
    return None


def _value_matches(value: Any, allowed: tuple[tuple[type, ...], tuple[Any, ...] | None, bool]) -> bool:
    kinds, choices, nullable = allowed
    if value is None:
        return nullable
    if isinstance(value, bool) and bool not in kinds:
        return False
    if choices is not None:
        return value in choices
    return isinstance(value, kinds)


_SPREAD = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _arguments(target: Any) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """The named arguments ``target`` takes, their type hints, and whether it takes any keyword
    besides. A class whose ``__init__`` passes ``**kwargs`` on to its base's
    (``MLMPredictor(MDLMPredictor(UnmaskingPredictor))``) takes the base's arguments too, and
    any keyword only if the last ``__init__`` in that chain does."""
    if not inspect.isclass(target):
        parameters = inspect.signature(target).parameters
        return ({name: p for name, p in parameters.items() if p.kind not in _SPREAD}, typing.get_type_hints(target),
                any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()))
    named: dict[str, inspect.Parameter] = {}
    hints: dict[str, Any] = {}
    for cls in target.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        if cls is object:
            return named, hints, False
        parameters = inspect.signature(init).parameters
        hints = {**typing.get_type_hints(init), **hints}
        named.update({name: p for name, p in parameters.items()
                      if name != "self" and p.kind not in _SPREAD and name not in named})
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return named, hints, False
    return named, hints, True


def refuses_argument(target_name: str, argument: str) -> bool:
    """Whether the component ``target_name`` certainly takes no argument ``argument`` (False when it
    takes it, takes any keyword, or cannot be imported or inspected)."""
    try:
        parameters, _, takes_any = _arguments(_locate(target_name))
    except Exception:  # an unimportable target is reported where the component is checked
        return False
    return not takes_any and argument not in parameters


def check_component(node: Mapping[str, Any], where: str, sources: Mapping[str, str] | None = None,
                    values: bool = True) -> None:
    """Keys and simple value types of one ``_target_`` node against the target's signature.
    ``sources``: the key a value was interpolated from, by argument name (``mdlm.eps`` for
    ``collator.train.eps: ${mdlm.eps}``), so that a bad value is named as it was typed.
    ``values=False``: the keys only (the values may still hold interpolations to resolve)."""
    target_name = node.get("_target_")
    if target_name is None:
        return
    try:
        target = _locate(target_name)  # hydra.utils.get_object would log the failure on stderr too
    except Exception as error:
        raise XdllmError(f"{where}._target_={target_name!r} cannot be imported: {error}") from error
    try:
        parameters, hints, takes_any = _arguments(target)
    except (TypeError, ValueError, NameError):
        return
    for key, value in node.items():
        if key.startswith("_"):
            continue
        if key not in parameters:
            if takes_any:
                continue
            names = [name for name in parameters if name not in ("self", "tokenizer")]
            raise XdllmError(f"{where}.{key}{did_you_mean(key, names, f'{where}.')}: {target_name} takes no "
                             f"argument {key!r}; it takes: {', '.join(names)}")
        if not values:
            continue
        allowed = _annotation_rule(hints.get(key, inspect.Parameter.empty))
        if allowed is not None and not _value_matches(value, allowed):
            kinds, choices, nullable = allowed
            expected = (" or ".join(repr(c) for c in choices) if choices is not None
                        else " or ".join(_TYPE_WORDS.get(k, "a number" if k is float else k.__name__)
                                         for k in kinds if not (k is int and float in kinds)))
            null = " (or null)" if nullable else ""
            source = (sources or {}).get(key)
            if source is not None:
                raise XdllmError(f"{source}={value!r} is not allowed: it sets {where}.{key}, which must be "
                                 f"{expected}{null}")
            raise XdllmError(f"{where}.{key}={value!r} is not allowed: {where}.{key} must be {expected}{null}")


def _interpolation_sources(node: DictConfig) -> dict[str, str]:
    """The keys of ``node`` whose value is one interpolation of another key, ``${key}``, and that key."""
    raw = OmegaConf.to_container(node, resolve=False)
    return {key: match.group(1) for key, value in raw.items()
            if isinstance(value, str) and (match := _INTERPOLATION.fullmatch(value))}


_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")


def check_component_keys(config: DictConfig) -> None:
    """Every component node's keys against its target's arguments, before anything is built
    (``xdllm train --cfg`` included): values are checked once they resolve (:func:`check_components`).
    An interpolation of a key the config lacks is named first (it says the groups chosen mix
    families), except ``${derived.*}``, filled in once the task is built."""
    for where in COMPONENT_NODES:
        node = OmegaConf.select(config, where, throw_on_missing=False)
        if node is None:
            continue
        try:
            OmegaConf.to_container(node, resolve=True)
        except InterpolationKeyError as error:
            if not _DERIVED_KEY.search(str(error)):
                raise _mixed_families(config, error) from error
        except OmegaConfBaseException:  # anything else unresolved yet is resolved, and checked, when the run builds
            pass
        check_component(OmegaConf.to_container(node, resolve=False), where, values=False)


def check_components(config: DictConfig) -> None:
    for where in COMPONENT_NODES:
        node = OmegaConf.select(config, where, throw_on_missing=False)
        if node is None:
            continue
        try:
            resolved = OmegaConf.to_container(node, resolve=True)
        except InterpolationKeyError as error:
            raise _mixed_families(config, error) from error
        check_component(resolved, where, _interpolation_sources(node))


_DERIVED_KEY = re.compile(r"Interpolation key 'derived\.")


def _mixed_families(config: DictConfig, error: InterpolationKeyError) -> XdllmError:
    """The line for an interpolation of a key the config lacks: the groups chosen mix families."""
    family = config.get("model_family", "<unknown>")
    return XdllmError(f"{error.full_key} refers to a key this config does not have "
                      f"({str(error).splitlines()[0]}); the model family is {family}: do the config groups "
                      f"chosen (collator=, model=, experiment=) belong to the same family?")
