"""Every ``xdllm train``, ``generate`` and ``eval`` command written in the README, docs/,
experiments/ and the family packages' pages composes as written: a renamed option, a misspelt
key or a value outside its range fails here, not in a reader's terminal. A family the documents
make with ``xdllm models new NAME [--from FAMILY]`` is made here too, and found by the commands
that select it.

Composing checks every key and value a command gives (for ``train``, also the family
components' arguments), runs nothing and needs none of the runs the commands name. Commands
with placeholders (``<time>``, ``...``, ``/path/to``, shell variables) are skipped; a sweep
(``KEY=A,B``) is checked with its first value of each key; ``[KEY=VALUE]`` (an optional
argument) with it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from documented import DOCUMENTS, ROOT

from xdllm.config.compose import compose_config
from xdllm.family_fork import fork_family

COMMAND = re.compile(r"(?:^|[\s`$(])xdllm (train|generate|eval) ([^`\n]*)")
PLACEHOLDERS = ("<", "...", "$", "/path/to")
SHELL_OPERATORS = ("&&", "||", "|", ";", ">", "2>&1")


def _overrides(text: str) -> list[str] | None:
    """The Hydra overrides of a command's arguments, or None where it holds a placeholder."""
    text = re.split(r"\s#", text)[0]
    if any(placeholder in text for placeholder in PLACEHOLDERS):
        return None
    overrides = []
    for word in shlex.split(text):
        if word in SHELL_OPERATORS or word.startswith(">"):
            break
        if word.startswith("[") and word.endswith("]"):
            word = word[1:-1]  # an optional argument
        key, equals, value = word.partition("=")
        if not equals or word.startswith("-") or key == "resume":  # flags; resume= is xdllm's, not Hydra's
            continue
        if "," in value and not value.startswith("["):
            value = value.split(",")[0]  # a sweep's first value
        overrides.append(f"{key}={value}")
    return overrides


def _documented_commands() -> list[tuple[str, str, list[str]]]:
    """``(where, command, overrides)`` of every command the documents write, continued lines joined."""
    commands = []
    for document in DOCUMENTS:
        lines = document.read_text().splitlines()
        for number, line in enumerate(lines, start=1):
            match = COMMAND.search(line)
            if match is None:
                continue
            text, following = match[2], number
            while text.rstrip().endswith("\\") and following < len(lines):
                text = text.rstrip()[:-1] + " " + lines[following].strip()
                following += 1
            overrides = _overrides(text)
            if overrides is not None:
                commands.append((f"{document.relative_to(ROOT)}:{number}", match[1], overrides))
    return commands


COMMANDS = _documented_commands()
NEW_FAMILY = re.compile(r"xdllm models new ([a-z]\w*)(?: --from (\w+))?")  # NAME: the syntax, not a name
DOCUMENTED_COPIES = {name: source or "mlm" for document in DOCUMENTS
                     for name, source in NEW_FAMILY.findall(document.read_text())}


@pytest.fixture(scope="module")
def documented_copies(tmp_path_factory) -> Path:
    """The folder holding the families the documents make with ``xdllm models new``."""
    folder = tmp_path_factory.mktemp("families")
    for name, source in DOCUMENTED_COPIES.items():
        fork_family(source, name, folder)
    return folder


def test_the_documents_are_read():
    assert len(COMMANDS) > 150
    assert {command for _, command, _ in COMMANDS} == {"train", "generate", "eval"}


@pytest.mark.parametrize("command, overrides", [(command, overrides) for _, command, overrides in COMMANDS],
                         ids=[where for where, _, _ in COMMANDS])
def test_a_documented_command_composes(command, overrides, request):
    if any(override.partition("=")[::2] in {("model", name) for name in DOCUMENTED_COPIES} for override in overrides):
        overrides = [*overrides, f"model_search_path=[{request.getfixturevalue('documented_copies')}]"]
    compose_config("train" if command == "train" else "generate", overrides)


def test_the_families_the_documents_make_are_read():
    assert DOCUMENTED_COPIES == {"my_mlm": "mlm", "my_bd3lm": "bd3lm"}


@pytest.mark.parametrize("text, overrides", [
    ("experiment=sort_mlm trainer.max_steps=500 run_dir=runs/quick", ["experiment=sort_mlm",
                                                                      "trainer.max_steps=500", "run_dir=runs/quick"]),
    ("-m experiment=sort_mlm optim.lr=1e-3,3e-4 seed=0,1   # a sweep", ["experiment=sort_mlm", "optim.lr=1e-3",
                                                                        "seed=0"]),
    ("resume=runs/quick trainer.max_steps=800 > log.txt", ["trainer.max_steps=800"]),
    ("ckpt=runs/a [predictor.threshold=0.9] model_search_path=[a,b]", ["ckpt=runs/a", "predictor.threshold=0.9",
                                                                       "model_search_path=[a,b]"]),
    ("ckpt=runs/quick/generate/<time>", None),
    ("--cfg experiment=sort_mdlm && echo done x=1", ["experiment=sort_mdlm"]),
])
def test_how_a_command_is_read(text, overrides):
    assert _overrides(text) == overrides
