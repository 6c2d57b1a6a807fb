"""The arguments a component's constructor takes, following ``**kwargs`` to its bases.

One walk for the config check (:mod:`xdllm.config.components`: which keys a ``_target_`` takes)
and for what a predictor prints of itself (``UnmaskingPredictor.extra_repr``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

_SPREAD = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def argument_chain(target: Any) -> tuple[list[Callable[..., Any]], bool]:
    """The functions whose signatures name the arguments ``target`` takes, and whether it takes
    any keyword besides. A function names its own; a class, its ``__init__`` and, while an
    ``__init__`` passes ``**kwargs`` on (``MDLMPredictor(UnmaskingPredictor)``), its bases'. It
    takes any keyword when the last ``__init__`` of that chain takes ``**kwargs`` (``object``'s does
    not count)."""
    if not inspect.isclass(target):
        return [target], _takes_any_keyword(target)
    chain: list[Callable[..., Any]] = []
    for cls in target.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        if cls is object:
            return chain, False
        chain.append(init)
        if not _takes_any_keyword(init):
            return chain, False
    return chain, True


def named_arguments(chain: list[Callable[..., Any]]) -> dict[str, inspect.Parameter]:
    """The named parameters of ``chain`` (see :func:`argument_chain`), the first to name one
    winning, without ``self``, ``*args`` and ``**kwargs``."""
    named: dict[str, inspect.Parameter] = {}
    for function in chain:
        for name, parameter in inspect.signature(function).parameters.items():
            if name != "self" and parameter.kind not in _SPREAD and name not in named:
                named[name] = parameter
    return named


def _takes_any_keyword(function: Callable[..., Any]) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(function).parameters.values())
