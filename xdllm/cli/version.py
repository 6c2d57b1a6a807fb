"""``xdllm --version``: what a bug report needs to name: xdllm, where it runs from, and the
versions of Python, torch (and whether it sees a CUDA device) and Lightning."""

from __future__ import annotations

import argparse
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any


def version_line() -> str:
    """``xdllm 0.1.0 at <package folder>; python 3.12.3, torch 2.13.0+cpu (no CUDA device), lightning 2.6.0``."""
    import torch  # here, not at start: `xdllm --help` stays fast

    cuda = (f"CUDA {torch.version.cuda}: {torch.cuda.device_count()} device(s)" if torch.cuda.is_available()
            else "no CUDA device")
    package = Path(__file__).resolve().parents[1]
    return (f"xdllm {metadata.version('xdllm')} at {package}; python {platform.python_version()}, "
            f"torch {torch.__version__} ({cuda}), lightning {metadata.version('lightning')}")


class ShowVersion(argparse.Action):
    """Print :func:`version_line` and exit, as argparse's ``version`` action does."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the versions of xdllm, python, torch and lightning, and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(version_line(), file=sys.stdout)
        parser.exit()
