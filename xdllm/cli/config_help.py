"""The options a command takes, read from its config files: every key, its default and the comment
written above it (or beside it) in the YAML file, for ``--help``.

Convention of the config files: a comment block that opens a file describes the file (shown as
the section's heading); a comment block directly above a key, or after its value on the same
line, describes that key.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from xdllm.config.compose import ROOT_CONFIG_DIR

_KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w-]*)\s*:(?P<rest>.*)$")


@dataclass(frozen=True)
class ConfigKey:
    key: str
    default: str
    comment: str


@dataclass(frozen=True)
class ConfigSection:
    title: str
    description: str
    keys: list[ConfigKey]


def _comments(path: Path) -> tuple[str, dict[str, str]]:
    """The file's opening comment and each dotted key's comment."""
    header: list[str] = []
    pending: list[str] = []
    stack: list[tuple[int, str]] = []
    comments: dict[str, str] = {}
    seen_key = False
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped:
            if not seen_key and pending and not header:
                header, pending = pending, []
            pending = []
            continue
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            if not text.startswith("@package"):
                pending.append(text)
            continue
        match = _KEY_LINE.match(line)
        if match is None:  # a list item or a continued value
            pending = []
            continue
        if not seen_key and pending and not header:
            header, pending = pending, []
        seen_key = True
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        inline = match["rest"].partition(" #")[2].strip()
        text = " ".join([*pending, inline] if inline else pending)
        if text:
            comments[".".join(key for _, key in stack)] = text
        pending = []
    return " ".join(header), comments


def _leaves(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), node


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[" + ", ".join(_show(item) for item in value) + "]"
    return str(value)


def config_section(path: Path, prefix: str = "") -> ConfigSection:
    """Every leaf key of one config file (``defaults`` left out), under ``prefix``."""
    header, comments = _comments(path)
    values = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    keys = []
    for key, value in _leaves({k: v for k, v in values.items() if k != "defaults"}, ""):
        keys.append(ConfigKey(prefix + key, _show(value), comments.get(key, "")))
    return ConfigSection(str(path.relative_to(ROOT_CONFIG_DIR.parent)), header, keys)


def _width() -> int:
    return min(110, shutil.get_terminal_size((100, 24)).columns)


def format_sections(sections: list[ConfigSection]) -> str:
    width = _width()
    lines = []
    for section in sections:
        lines.append(f"{section.title}:")
        if section.description:
            lines += textwrap.wrap(section.description, width, initial_indent="  ", subsequent_indent="  ")
        for key in section.keys:
            option = f"  {key.key}={key.default}"
            if not key.comment:
                lines.append(option)
                continue
            column = 40
            comment = textwrap.wrap(key.comment, max(30, width - column))
            if len(option) < column - 1:
                lines.append(option.ljust(column) + comment[0])
                comment = comment[1:]
            else:
                lines.append(option)
            lines += [" " * column + text for text in comment]
        lines.append("")
    return "\n".join(lines)


TRAIN_SOURCES = (("train.yaml", ""), ("trainer/default.yaml", "trainer."), ("optim/adamw.yaml", "optim."))
RESUME = ConfigKey("resume", "null", "checkpoint file or run directory to continue from (a command "
                   "option, not stored in the config)")


def train_options_help() -> str:
    """The ``xdllm train`` options: ``resume``, every key of train.yaml and of its trainer and
    optimizer groups' defaults."""
    sections = [config_section(ROOT_CONFIG_DIR / name, prefix) for name, prefix in TRAIN_SOURCES]
    root = sections[0]
    sections[0] = ConfigSection(root.title, "", [RESUME, *root.keys])
    return "options (KEY=VALUE, shown with their defaults):\n\n" + format_sections(sections) + (
        "model.*, task.*, loss.*, predictor.*, evaluator.*, collator.*: set by the chosen model,\n"
        "  task and experiment; print them with: xdllm train --cfg experiment=NAME\n")


GENERATE_RESUME = ConfigKey("resume", "null", "the folder of a generation or sweep (-m) that was stopped "
                            "part-way: finish it with the options it started with (its generate.yaml, or "
                            "sweep.yaml); only device= and live= may be given with it")


def generate_options_help(command: str = "generate") -> str:
    """The ``xdllm generate`` / ``xdllm eval`` options: every key of generate.yaml (and for
    generate, ``resume``)."""
    section = config_section(ROOT_CONFIG_DIR / "generate.yaml")
    if command == "generate":
        section = ConfigSection(section.title, section.description, [GENERATE_RESUME, *section.keys])
    return "options (KEY=VALUE, shown with their defaults):\n\n" + format_sections([section])


def _resolve_each(config: DictConfig, node: Any, prefix: str) -> Any:
    if isinstance(node, dict):
        return {key: _resolve_each(config, value, f"{prefix}{key}.") for key, value in node.items()}
    if isinstance(node, str) and "${" in node:
        try:
            return OmegaConf.select(config, prefix.rstrip("."), throw_on_missing=False)
        except OmegaConfBaseException:  # e.g. ${derived.*}: known only once the run is built
            return node
    return node


def composed_yaml(config: DictConfig) -> str:
    """A composed config as YAML, each interpolation resolved where it can be (``${derived.*}``
    values, such as the vocabulary size, are known only once the task and tokenizer are built)."""
    plain = OmegaConf.to_container(config, resolve=False)
    return OmegaConf.to_yaml(OmegaConf.create(_resolve_each(config, plain, "")))
