"""The family component nodes' keys and values against their targets' signatures.

The third layer of :mod:`xdllm.config.schema`: in ``model``, ``loss``, ``predictor``,
``evaluator`` and ``collator.*`` every key must be a parameter of the ``_target_``'s signature
(a class that passes ``**kwargs`` on to its base takes the base's too), with a value of its
annotated type (ints, floats, bools, strings, their optional forms and literals). Keys are
checked at composition (:func:`check_component_keys`), values once they resolve
(:func:`check_components`, when the run is built).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from hydra._internal.utils import _locate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException

from xdllm.config.schema import COMPONENT_NODES, TYPE_WORDS, did_you_mean
from xdllm.config.signatures import argument_chain, named_arguments
from xdllm.errors import XdllmError


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


def _arguments(target: Any) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """The named arguments ``target`` takes, their type hints (the first function of the chain
    to annotate one winning), and whether it takes any keyword besides."""
    chain, takes_any = argument_chain(target)
    hints: dict[str, Any] = {}
    for function in reversed(chain):
        hints.update(typing.get_type_hints(function))
    return named_arguments(chain), hints, takes_any


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
                        else " or ".join(TYPE_WORDS.get(k, "a number" if k is float else k.__name__)
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
    (``xdllm train --cfg`` included): values are checked once they resolve (:func:`check_components`)."""
    for where, node in _component_nodes(config):
        _resolved(config, node, pending=True)
        check_component(OmegaConf.to_container(node, resolve=False), where, values=False)


def check_components(config: DictConfig) -> None:
    """Every component node's keys and values, once ``${derived.*}`` is filled in."""
    for where, node in _component_nodes(config):
        check_component(_resolved(config, node), where, _interpolation_sources(node))


def _component_nodes(config: DictConfig) -> Iterator[tuple[str, DictConfig]]:
    for where in COMPONENT_NODES:
        node = OmegaConf.select(config, where, throw_on_missing=False)
        if node is not None:
            yield where, node


def _resolved(config: DictConfig, node: DictConfig, pending: bool = False) -> dict[str, Any] | None:
    """``node`` with its interpolations resolved. An interpolation of a key the config lacks says
    the groups chosen mix families, and is refused; with ``pending`` (before the task is built)
    one of ``${derived.*}``, or any value resolved later, gives None instead."""
    try:
        return OmegaConf.to_container(node, resolve=True)
    except InterpolationKeyError as error:
        if not (pending and _DERIVED_KEY.search(str(error))):
            raise _mixed_families(config, error) from error
    except OmegaConfBaseException:
        if not pending:
            raise
    return None


_DERIVED_KEY = re.compile(r"Interpolation key 'derived\.")


def _mixed_families(config: DictConfig, error: InterpolationKeyError) -> XdllmError:
    """The line for an interpolation of a key the config lacks: the groups chosen mix families."""
    family = config.get("model_family", "<unknown>")
    return XdllmError(f"{error.full_key} refers to a key this config does not have "
                      f"({str(error).splitlines()[0]}); the model family is {family}: do the config groups "
                      f"chosen (collator=, model=, experiment=) belong to the same family?")
