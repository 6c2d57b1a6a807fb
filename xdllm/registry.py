"""Discovery of model-family packages.

Families come from two places, treated alike:

1. the ``xdllm.models`` entry-point group (the built-in families register this way too);
2. a search path of folders holding packages that are not installed: the ``XDLLM_MODEL_PATH``
   environment variable (``os.pathsep``-separated) and the ``model_search_path`` config key.
   Every sub-folder with an ``__init__.py`` is imported and must define ``FAMILY``.

Errors are never swallowed: a package that fails to import, lacks ``FAMILY``, has no
``config_dir/model/<name>.yaml`` for its family's name, or claims a name another package already
claimed raises :class:`ModelRegistryError` naming both sources.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

from xdllm.model_family import ModelFamily

ENTRY_POINT_GROUP = "xdllm.models"
SEARCH_PATH_ENV = "XDLLM_MODEL_PATH"
NEW_FAMILY_FOLDER = Path("families")
"""Where ``xdllm models new`` writes a family's package unless told otherwise."""


class ModelRegistryError(RuntimeError):
    """A model package could not be discovered or two packages claim one name."""


@dataclass(frozen=True)
class RegisteredFamily:
    family: ModelFamily
    source: str
    module: str
    """The import name of the module that defines ``FAMILY`` (``xdllm_models.mlm``)."""
    folder: Path | None = None
    """The search-path folder the package was found in (None: an entry point)."""


def search_path_from_env() -> list[Path]:
    raw = os.environ.get(SEARCH_PATH_ENV, "")
    return [Path(part) for part in raw.split(os.pathsep) if part]


def _check_family(obj: object, source: str) -> ModelFamily:
    if not isinstance(obj, ModelFamily):
        raise ModelRegistryError(
            f"{source}: expected an xdllm.interfaces.ModelFamily, got {type(obj).__name__}")
    if not obj.config_dir.is_dir():
        raise ModelRegistryError(f"{source}: config_dir {obj.config_dir} is not a directory")
    model_config = obj.config_dir / "model" / f"{obj.name}.yaml"
    if not model_config.is_file():  # model=<name> selects this file: without it the family cannot be chosen
        found = sorted(path.name for path in model_config.parent.glob("*.yaml"))
        raise ModelRegistryError(
            f"{source}: family '{obj.name}' has no model config {model_config} (found there: "
            f"{', '.join(found) or 'none'}); a family's name must match its config_dir/model/<name>.yaml")
    return obj


def _from_entry_points() -> Iterable[RegisteredFamily]:
    for entry_point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        source = f"entry point '{entry_point.name} = {entry_point.value}'"
        try:
            loaded = entry_point.load()
        except Exception as error:  # re-raised with the entry point named
            raise ModelRegistryError(f"{source} failed to load: {error}") from error
        yield RegisteredFamily(_check_family(loaded, source), source, entry_point.module)


def _check_search_path(search_path: Iterable[str | Path]) -> None:
    """Refuse a folder that is not there, naming where it was given: ``model_search_path`` (which
    a run records, so a package that moved since is met on ``resume=``) or the variable."""
    for folder in map(Path, search_path):
        if not folder.expanduser().is_dir():
            raise ModelRegistryError(
                f"model_search_path entry {folder} is not a directory: give the folder that holds the family's "
                "package now with model_search_path=[<folder>] (a run records the folder its family was found "
                "in, and resume= looks there)")
    for folder in search_path_from_env():
        if not folder.expanduser().is_dir():
            raise ModelRegistryError(f"{SEARCH_PATH_ENV} entry {folder} is not a directory")


def _from_search_path(folders: Iterable[Path]) -> Iterable[RegisteredFamily]:
    for folder in folders:
        for package_dir in sorted(p for p in folder.iterdir() if (p / "__init__.py").is_file()):
            source = f"package {package_dir}"
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
            try:
                module = importlib.import_module(package_dir.name)
            except Exception as error:
                raise ModelRegistryError(f"{source} failed to import: {error}") from error
            if Path(module.__file__).resolve().parent != package_dir:
                raise ModelRegistryError(
                    f"{source}: import name '{package_dir.name}' resolves to {module.__file__}, "
                    "another module of that name shadows it")
            if not hasattr(module, "FAMILY"):
                raise ModelRegistryError(f"{source} defines no FAMILY (xdllm.interfaces.ModelFamily)")
            yield RegisteredFamily(_check_family(module.FAMILY, source), source, package_dir.name, folder)


def discover_families(search_path: Iterable[str | Path] = ()) -> dict[str, RegisteredFamily]:
    """All model families, by name. Raises :class:`ModelRegistryError` on any problem."""
    search_path = list(search_path)
    _check_search_path(search_path)
    folders = list(dict.fromkeys(Path(p).expanduser().resolve()
                                 for p in [*search_path, *search_path_from_env()]))
    found: dict[str, RegisteredFamily] = {}
    for registered in [*_from_entry_points(), *_from_search_path(folders)]:
        name = registered.family.name
        if name in found:
            raise ModelRegistryError(
                f"model family '{name}' is claimed twice: by {found[name].source} "
                f"and by {registered.source}")
        found[name] = registered
    return found


def unfound_family_hint(name: str) -> str:
    """What to say of a family ``name`` that was not found but whose package is in
    :data:`NEW_FAMILY_FOLDER` (made by ``xdllm models new``, the folder not on the search path); else ''."""
    package = NEW_FAMILY_FOLDER / name
    if not (package / "__init__.py").is_file():
        return ""
    folder = NEW_FAMILY_FOLDER.resolve()
    return (f"; {package} holds a family package, which xdllm finds once its folder is on the search path: "
            f"{search_path_export(folder)} (or model_search_path=[{folder}] on the command)")


def on_search_path(folder: Path) -> bool:
    """Whether ``$XDLLM_MODEL_PATH`` names ``folder``."""
    return folder.resolve() in [path.expanduser().resolve() for path in search_path_from_env()]


def search_path_export(folder: Path) -> str:
    """The shell line that puts ``folder`` on ``$XDLLM_MODEL_PATH``, first, keeping the folders it names."""
    return f"export {SEARCH_PATH_ENV}={os.pathsep.join([str(folder.resolve()), *map(str, search_path_from_env())])}"
