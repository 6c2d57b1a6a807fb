"""A package's public names loaded on first use (PEP 562), so that importing the package, or a
light module of it, does not load what the other names need (torch, Lightning, matplotlib)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_names(package: str, module_of: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` whose name ``N`` is defined in its module
    ``module_of[N]`` (relative: ``"run.checkpoint"`` for ``xdllm.run.checkpoint``); ``__dir__``
    lists them too, for a notebook's tab completion."""

    def __getattr__(name: str) -> object:  # noqa: N807 (the module attribute Python looks up)
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module_of[name]}"), name)

    def __dir__() -> list[str]:  # noqa: N807
        return sorted({*vars(sys.modules[package]), *module_of})

    return __getattr__, __dir__
