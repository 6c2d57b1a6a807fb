"""``xdllm models new NAME``: a new model family that starts as a copy of one that works.

A researcher's family usually begins as a change to an existing one. The copy is a package of
its own, ``<folder>/<name>/``: the source family's modules and configs, with every reference to
the source package pointing at the copy, the family registered under the new name, and the
config files and the family's own config section renamed (``mlm:`` and ``${mlm.x}`` become
``<name>:`` and ``${<name>.x}``; ``packed_mlm.yaml`` becomes ``packed_<name>.yaml``). It trains,
generates and passes the shared family tests before its first edit; the user then changes what
the idea needs. xdllm itself is not touched.

The copy is written beside its destination under a temporary name, loaded once in a separate
Python (found by the registry, every ``_target_`` of its configs importable), and only then
renamed into place: a copy that would not load is not left behind, and nothing is overwritten.
"""

from __future__ import annotations

import importlib.util
import keyword
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xdllm.errors import XdllmError
from xdllm.registry import RegisteredFamily, discover_families
from xdllm.temporary_files import temporary_path

NAME_FORM = re.compile(r"[a-z][a-z0-9_]*\Z")
SKIPPED = ("__pycache__",)
HEADER = ("# The {name} family: started as a copy of the {source} family ({module}),\n"
          "# made by `xdllm models new`; change what your idea needs.\n")
OLD_HEADER = re.compile(r"\A# The \w+ family: started as a copy of .*\n# made by `xdllm models new`.*\n")
"""The header of a family copied before: a copy of a copy says where it came from once."""


@dataclass(frozen=True)
class ForkedFamily:
    """What ``xdllm models new`` wrote: the new family's package and where it came from."""

    name: str
    source: str
    source_module: str
    package_dir: Path
    files: tuple[str, ...]
    """The package's files, relative to it, sorted."""
    experiments: tuple[str, ...]
    """The experiments the copy ships (``configs/experiment/*.yaml`` stems), sorted."""
    frozen_models: dict[str, str]


def check_family_name(name: str, families: dict[str, RegisteredFamily]) -> None:
    """Refuse a name that cannot be a family's: what ``model=<name>`` selects and the package's
    import name, so a lower-case Python identifier, not taken by a family or an importable module."""
    if not NAME_FORM.match(name) or keyword.iskeyword(name):
        raise XdllmError(
            f"family name {name!r} is not usable: it names the config model=<name> and the package's import name, "
            "so it must be a lower-case Python identifier (letters, digits, _; a letter first), e.g. my_mlm")
    if name in families:
        raise XdllmError(f"family name {name!r} is taken, by {families[name].source}: choose another name")
    spec = importlib.util.find_spec(name)
    if spec is not None:
        where = spec.origin or ", ".join(spec.submodule_search_locations or ()) or "built in"
        raise XdllmError(f"family name {name!r} is taken by an importable module ({where}): the package would not "
                         "import as itself; choose another name")


def _source_package(registered: RegisteredFamily) -> Path:
    """The source family's package folder; its configs must be the package's ``configs/``."""
    module = sys.modules.get(registered.module)
    if module is None or module.__file__ is None or Path(module.__file__).name != "__init__.py":
        raise XdllmError(f"model family {registered.family.name!r} is defined in module {registered.module!r}, not "
                         "in a package's __init__.py: xdllm models new copies packages; copy it by hand")
    package = Path(module.__file__).resolve().parent
    if registered.family.config_dir.resolve() != package / "configs":
        raise XdllmError(f"model family {registered.family.name!r} keeps its configs in "
                         f"{registered.family.config_dir}, outside its package {package}/configs: copy it by hand")
    return package


def _renamer(module: str, source: str, name: str) -> tuple[Callable[[str], str], Callable[[str], str]]:
    """Two rewrites of the source's text, each one pass (text already rewritten is never rewritten
    again). In code: the package's import name, alone or leading a dotted name
    (``xdllm_models.mlm``, ``xdllm_models.mlm.loss.MLMLoss``). In configs: the same, a dotted name
    led by the family's name (its config section, ``${mlm.target_length}``), and the family's name
    as a word of its own (``mlm``, ``packed_mlm``, ``sort_mlm``; not ``mdlm``); other dotted names
    (another module's ``_target_``) are left as they are."""
    def in_dotted(dotted: str) -> str:
        for prefix in (module, source):
            if dotted == prefix or dotted.startswith(f"{prefix}."):
                return name + dotted[len(prefix):]
        return dotted

    in_code = re.compile(rf"(?<![\w.]){re.escape(module)}(?:\.\w+)*(?!\w)")
    in_configs = re.compile(rf"(?<![\w.])(?P<dotted>[A-Za-z_]\w*(?:\.\w+)+)|{_as_a_word(source)}")
    return ((lambda text: in_code.sub(lambda match: in_dotted(match[0]), text)),
            (lambda text: in_configs.sub(lambda match: in_dotted(match[0]) if match["dotted"] else name, text)))


def _as_a_word(name: str) -> str:
    """A pattern of ``name`` between characters that are not letters or digits (``packed_mlm``'s
    ``mlm``, not ``mdlm``'s)."""
    return rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])"


def _rename_family(init_text: str, source: str, name: str, where: Path) -> str:
    """``FAMILY = ModelFamily(name="<source>", ...)`` with the new name; exactly one such literal."""
    pattern = re.compile(rf"(\bname\s*=\s*)([\"']){re.escape(source)}\2")
    found = pattern.findall(init_text)
    if len(found) != 1:
        raise XdllmError(f"{where}: expected one name={source!r} (the ModelFamily's) to rename, found "
                         f"{len(found)}: copy this family by hand")
    return pattern.sub(lambda match: f"{match[1]}{match[2]}{name}{match[2]}", init_text)


def _copy_package(package: Path, copy: Path, registered: RegisteredFamily, name: str) -> list[str]:
    """Write the renamed copy of ``package`` into ``copy``; returns the files written, relative."""
    source = registered.family.name
    code_text, config_text = _renamer(registered.module, source, name)
    config_word = re.compile(_as_a_word(source))
    written = []
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package)
        if any(part in SKIPPED for part in relative.parts) or path.is_dir() or path.suffix == ".pyc":
            continue
        in_configs = relative.parts[0] == "configs"
        if in_configs:
            relative = relative.with_name(config_word.sub(name, relative.stem) + relative.suffix)
        target = copy / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".py":
            text = path.read_text(encoding="utf-8")
            if relative == Path("__init__.py"):  # the family's name first: it may be the module's too
                header = HEADER.format(name=name, source=source, module=registered.module)
                text = header + code_text(_rename_family(OLD_HEADER.sub("", text, count=1), source, name, path))
            else:
                text = code_text(text)
            target.write_text(text, encoding="utf-8")
        elif in_configs and path.suffix == ".yaml":
            target.write_text(config_text(path.read_text(encoding="utf-8")), encoding="utf-8")
        else:
            shutil.copy2(path, target)
        written.append(relative.as_posix())
    return written


def _check_loads(staging: Path, name: str) -> None:
    """Load the copy in a separate Python, as ``xdllm train`` would find it."""
    checked = subprocess.run([sys.executable, "-m", "xdllm.family_load_check", str(staging), name],
                             capture_output=True, text=True, check=False)
    if checked.returncode != 0:
        said = (checked.stderr.strip().splitlines() or ["(it said nothing)"])[-1]
        raise XdllmError(f"the copy as {name!r} does not load ({said}); nothing was written")


def fork_family(source: str, name: str, folder: Path) -> ForkedFamily:
    """Write ``folder/name/``: a new family ``name`` that starts as a copy of family ``source``.

    Refused before anything is written: a ``name`` that cannot be a family's or is taken, an
    unknown ``source``, a ``folder`` that is a file, a ``folder/name`` that exists."""
    families = discover_families()
    registered = families.get(source)
    if registered is None:
        raise XdllmError(f"no model family {source!r} to start from; the families: {', '.join(sorted(families))} "
                         "(xdllm models)")
    check_family_name(name, families)
    package = _source_package(registered)
    if folder.exists() and not folder.is_dir():
        raise XdllmError(f"{folder} is not a folder: give the folder to write the package {name}/ in")
    destination = folder / name
    if destination.exists() or destination.is_symlink():
        raise XdllmError(f"{destination} exists: nothing is overwritten; choose another name or folder")
    made_folder = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    staging = temporary_path(destination)
    staging.mkdir()
    try:
        files = _copy_package(package, staging / name, registered, name)
        _check_loads(staging, name)
        os.rename(staging / name, destination)
    except BaseException:
        shutil.rmtree(staging)
        if made_folder and not any(folder.iterdir()):
            folder.rmdir()
        raise
    staging.rmdir()
    experiments = sorted(Path(file).stem for file in files if file.startswith("configs/experiment/"))
    return ForkedFamily(name, source, registered.module, destination, tuple(files), tuple(experiments),
                        dict(registered.family.frozen_models))
