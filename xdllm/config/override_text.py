"""Values written into Hydra overrides, and overrides written into shell commands.

Hydra reads an unquoted override value only if it holds ASCII letters, digits, spaces and
``/ . _ - + : @ $ % * ? |``: a path such as ``runs/künstler``, ``runs/copy (1)`` or ``runs/a,b``
must be quoted (``ckpt='runs/copy (1)'``), and a command printed for the user must then quote that
override again for the shell. Every override xdllm builds from a path, and every command it prints
for the user to run, goes through here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from xdllm.errors import XdllmError
from xdllm.folder_names import GENERATE_CONFIG, SWEEP_PLAN

PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./:@+-]+")
"""Values written unquoted (a subset of what Hydra reads unquoted, without its whitespace and
interpolation characters)."""
PLAIN_SHELL_WORD = re.compile(r"[A-Za-z0-9_./:@+=,%-]+")
SHELL_SPECIAL_IN_DOUBLE_QUOTES = re.compile(r'["$`\\!]')


def override_value(value: str | Sequence[str]) -> str:
    """``value`` as an override's right-hand side: plain characters as they are, anything else in
    single quotes (quotes escaped, and the backslashes before them), a list as ``[a,b]``."""
    if not isinstance(value, str):
        return f"[{','.join(map(override_value, value))}]"
    if PLAIN_VALUE.fullmatch(value):
        return value
    # inside quotes Hydra reads a backslash as itself, except before a quote (or the closing one)
    escaped = re.sub(r"(\\*)('|$)", lambda found: found[1] * 2 + ("\\'" if found[2] else ""), value)
    return f"'{escaped}'"


def override(key: str, value: object) -> str:
    """``key=value`` that Hydra reads back as ``str(value)``."""
    return f"{key}={override_value(str(value))}"


def shell_word(word: str) -> str:
    """``word`` as a shell reads it back: as it is when plain, else in double quotes where that
    needs no escapes (``"ckpt='runs/copy (1)'"``), else in single quotes."""
    if PLAIN_SHELL_WORD.fullmatch(word):
        return word
    if not SHELL_SPECIAL_IN_DOUBLE_QUOTES.search(word):
        return f'"{word}"'
    return shlex.quote(word)


def command(*words: str) -> str:
    """A command line to print for the user: ``words`` joined, each quoted for the shell where needed."""
    return " ".join(map(shell_word, words))


def _path_given_bare(text: str, command_name: str | None, sweep: bool) -> str:
    """Where ``text`` (an override without ``=``) names an existing file or folder: the override
    ``xdllm <command_name>`` (train, generate; ``-m`` where ``sweep``) takes it as: ``resume=`` a
    run or checkpoint to continue, a stopped generation or sweep to finish; ``ckpt=`` the run or
    checkpoint to generate from."""
    path = Path(text)
    if command_name not in ("train", "generate") or not path.exists():
        return ""
    records = (SWEEP_PLAN,) if sweep else (GENERATE_CONFIG,) if command_name == "generate" else ()
    if any((path / name).is_file() for name in records) or (command_name == "train" and not sweep):
        key = "resume"
    elif command_name == "generate":
        key = "ckpt"
    else:
        return ""
    return f"; it is a {'folder' if path.is_dir() else 'file'}: give it as {shell_word(override(key, text))}"


def check_override_syntax(overrides: Sequence[str], command_name: str | None = None, sweep: bool = False) -> None:
    """Refuse an override Hydra cannot read, in one line; for a value Hydra needs quoted, the line
    gives the quoted form, for the command line and for the shell. A path given alone (``xdllm
    generate runs/a``) is named with the key ``command_name`` (train, generate; a sweep of them
    where ``sweep``) takes it as."""
    from hydra.core.override_parser.overrides_parser import OverridesParser  # not for the history views
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for text in overrides:
        if "=" not in text and not text.startswith("~"):
            raise XdllmError(f"override {text!r} is not KEY=VALUE (nor ~KEY, which deletes a key)"
                             f"{_path_given_bare(text, command_name, sweep)}")
        try:
            parser.parse_override(text).value()  # value(): "d (1)" parses as a call of a function d
        except HydraException as error:
            reason = " ".join(str(error).split("\n")[0].split())
            key, equals, value = text.partition("=")
            hint = ""
            if equals and value and value[0] not in "'\"[{":
                quoted = f"{key}={override_value(value)}"
                hint = (f"; a value with characters other than ASCII letters, digits, spaces and / . _ - + : @ "
                        f"needs quotes: {quoted} (from a shell: {shell_word(quoted)})")
            raise XdllmError(f"override {text!r} cannot be read ({reason}){hint}") from error
