"""``python -m xdllm.family_load_check FOLDER NAME``: load the family package ``FOLDER/NAME`` as
``xdllm train`` finds it, in a Python of its own; exit 1 with one line saying what does not load.

Used by ``xdllm models new`` on its copy before moving it into place
(:mod:`xdllm.family_fork`): the registry must find family ``NAME`` in ``FOLDER``, and every
``_target_`` of its configs must import.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from xdllm.registry import ModelRegistryError, discover_families


def targets(node: Any) -> Iterator[str]:
    """Every ``_target_`` string in a loaded YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "_target_" and isinstance(value, str):
                yield value
            yield from targets(value)
    elif isinstance(node, list):
        for value in node:
            yield from targets(value)


def load_problem(folder: Path, name: str) -> str | None:
    """What keeps family ``name`` in ``folder`` from loading (None: it loads)."""
    try:
        found = discover_families([folder]).get(name)
    except ModelRegistryError as error:  # the copy does not import, say
        return str(error)
    if found is None or found.folder != folder.resolve():
        return f"the registry does not find family {name!r} in {folder}"
    for path in sorted(found.family.config_dir.rglob("*.yaml")):
        for target in targets(yaml.safe_load(path.read_text(encoding="utf-8"))):
            module, _, attribute = target.rpartition(".")
            try:
                getattr(importlib.import_module(module), attribute)
            except Exception as error:  # a module of the copy may fail in any way as it imports: said
                return f"{path.name}: _target_ {target} does not load: {type(error).__name__}: {error}"
    return None


if __name__ == "__main__":
    problem = load_problem(Path(sys.argv[1]), sys.argv[2])
    if problem is not None:
        sys.exit(problem)
