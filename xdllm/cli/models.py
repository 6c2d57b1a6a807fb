"""``xdllm models``: list the discovered model families; ``xdllm models new NAME``: start a family
as a copy of another (:mod:`xdllm.family_fork`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from xdllm.registry import NEW_FAMILY_FOLDER, discover_families, on_search_path, search_path_export

if TYPE_CHECKING:
    from xdllm.family_fork import ForkedFamily

DEFAULT_SOURCE = "mlm"
NEW_DESCRIPTION = (
    "Write FOLDER/NAME/, a model-family package that starts as a copy of another family (default mlm): its "
    "model, loss, collators, predictor, types and configs, renamed to NAME, ready to train and to pass the shared "
    "family tests before you change anything. Then change what your idea needs. Nothing is overwritten; xdllm is "
    "not touched. xdllm finds the package through XDLLM_MODEL_PATH=FOLDER (or model_search_path=[FOLDER]).")


def add_models_parser(commands: argparse._SubParsersAction) -> None:
    models = commands.add_parser(
        "models", help="list the model families; models new NAME: start one as a copy of another",
        usage="xdllm models [-h] [new NAME [--from FAMILY] [--dir FOLDER]]",
        description="List the discovered model-family packages (entry points and XDLLM_MODEL_PATH), or start a new "
                    "one with: xdllm models new NAME [--from FAMILY] [--dir FOLDER].")
    actions = models.add_subparsers(dest="models_action", metavar="ACTION")
    new = actions.add_parser("new", help="write a new family's package, a copy of another family to change",
                             description=NEW_DESCRIPTION)
    new.add_argument("name", metavar="NAME", help="the new family's name: model=NAME selects it, and it is its "
                                                   "package's import name (a lower-case Python identifier)")
    new.add_argument("--from", dest="source", default=DEFAULT_SOURCE, metavar="FAMILY",
                     help=f"the family to start from (default: {DEFAULT_SOURCE}; xdllm models lists them)")
    new.add_argument("--dir", dest="folder", type=Path, default=NEW_FAMILY_FOLDER, metavar="FOLDER",
                     help="the folder to write the package NAME/ in, created if needed (default: "
                          f"{NEW_FAMILY_FOLDER}); keep only family packages there: XDLLM_MODEL_PATH imports each one")


def run_models_command(arguments: argparse.Namespace) -> int:
    if arguments.models_action == "new":
        return _new_family(arguments.source, arguments.name, arguments.folder)
    return _list_families()


def _list_families() -> int:
    families = discover_families()
    if not families:
        print("no model families found")
    for name, registered in sorted(families.items()):
        print(f"{name:<12} {registered.family.description}")
        print(f"{'':<12} source: {registered.source}")
        print(f"{'':<12} configs: {registered.family.config_dir}")
    return 0


def _new_family(source: str, name: str, folder: Path) -> int:
    from xdllm.family_fork import fork_family

    fork = fork_family(source, name, folder)
    print(f"wrote {fork.package_dir}{os.sep}: family {name}, a copy of the {source} family ({fork.source_module}), "
          f"{len(fork.files)} files")
    print(f"change what your idea needs: {', '.join(_main_files(fork.files))}")
    print("then:")
    for command, why in _next_commands(fork):
        print(f"  {command}\n      {why}")
    return 0


def _main_files(files: tuple[str, ...]) -> list[str]:
    """The modules (other than ``__init__.py``) and the model config: what a user edits first."""
    modules = [file for file in files if file.endswith(".py") and "/" not in file and file != "__init__.py"]
    return [*modules, *(file for file in files if file.startswith("configs/model/"))]


def _next_commands(fork: ForkedFamily) -> list[tuple[str, str]]:
    """How to make the new family discoverable, train it and test it, as commands to paste."""
    from xdllm.config.compose import ROOT_CONFIG_DIR

    folder = fork.package_dir.parent.resolve()
    commands = []
    if not on_search_path(folder):
        commands.append((search_path_export(folder), f"how xdllm finds it (or model_search_path=[{folder}] on each "
                                                     "command)"))
    if f"sort_{fork.name}" in fork.experiments:
        choice = f"experiment=sort_{fork.name}"
    elif (ROOT_CONFIG_DIR / "experiment" / f"sort_{fork.source}.yaml").is_file():
        choice = f"experiment=sort_{fork.source} model={fork.name}"
    else:
        choice = f"model={fork.name} task=sort"
    needs = "".join(f" frozen.{key}=<{family}-run>" for key, family in fork.frozen_models.items())
    commands.append((f"xdllm train {choice}{needs} run_dir=runs/{fork.name}",
                     f"train it on the built-in sort task (its experiments: {', '.join(fork.experiments) or 'none'})"))
    commands.append((f"python -m pytest tests/families -k {fork.name}",
                     "the shared family tests, from a clone of xdllm (training, generation, history, resume, ...)"))
    return commands
