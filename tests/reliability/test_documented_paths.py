"""What the README, docs/, experiments/ and the family packages' pages point at exists: every
repository path they name (``xdllm/run/evaluate.py``, ``scripts/bench_history.py``,
``configs/experiment``) and every dotted Python name (``xdllm.history.load_history``), so a file
or function renamed in the code and not in a page fails the suite."""

from __future__ import annotations

import importlib
import re

from documented import DOCUMENTS, ROOT

PATH = re.compile(r"(?<![\w/.-])((?:xdllm|models|scripts|tests|configs|experiments|docs)/[\w/.-]*\w)")
NAME = re.compile(r"(?<![\w/.])((?:xdllm|xdllm_models)(?:\.\w+)+)")
FILE_SUFFIXES = (".py", ".md", ".yaml", ".json", ".jsonl", ".pt", ".txt")
NOT_IN_THE_REPOSITORY = {
    "configs/model/myfam.yaml", "configs/model",  # docs/model_families.md: a family package's own folder
    "scripts/bench_history_now.py",  # experiments/history_overhead.md: a copy made in an old checkout
}
NOT_PYTHON = {"xdllm.history.topk", "xdllm.models"}  # the history format's name, the entry-point group


def _mentions(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """``(where, text)`` of every match of ``pattern`` in the documents."""
    return [(f"{document.relative_to(ROOT)}:{number}", match[1])
            for document in DOCUMENTS
            for number, line in enumerate(document.read_text().splitlines(), start=1)
            for match in pattern.finditer(line)]


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute path under the longest importable one."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


def test_every_path_a_page_names_exists():
    paths = _mentions(PATH)
    assert len(paths) > 300
    missing = [(where, path) for where, path in paths
               if path not in NOT_IN_THE_REPOSITORY and not (ROOT / path).exists()]
    assert not missing


def test_every_python_name_a_page_names_resolves():
    names = [(where, name.rstrip(".")) for where, name in _mentions(NAME) if not name.endswith(FILE_SUFFIXES)]
    assert len(names) > 50
    unresolved = [(where, name) for where, name in names if name not in NOT_PYTHON and not _resolves(name)]
    assert not unresolved


def test_a_renamed_function_or_file_would_be_caught():
    assert not _resolves("xdllm.history.load_histories") and _resolves("xdllm.history.load_history")
    assert PATH.findall("see `xdllm/run/evaluate.py` and scripts/bench_rotary.py.") == [
        "xdllm/run/evaluate.py", "scripts/bench_rotary.py"]
