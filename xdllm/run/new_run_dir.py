"""The folder of a new run trained without ``run_dir``: ``runs/<name>/<time>``, made when the run
starts, so that runs started in the same second (``for s in 0 1 2; do xdllm train seed=$s & done``)
each get their own (``<time>``, ``<time>-2``, ...); they used to name the same folder and all but
one were refused as using another's run directory. The processes the run starts (DDP) find it in
the environment (``XDLLM_RUN_DIR``). A run that fails before it writes anything there (a bad
option, a component that cannot be built) leaves no empty folder behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig

from xdllm.run.new_folder import new_folder, time_stamp

RUN_DIR_ENV = "XDLLM_RUN_DIR"


@contextmanager
def new_run_dir(config: DictConfig, resume: str | None) -> Iterator[None]:
    """Around a training: make a new run's folder (not for ``run_dir=``, ``resume=`` or a process
    DDP started) and name it in ``XDLLM_RUN_DIR`` for the block; on a failure remove it and the
    folders made for it where the run left them empty."""
    if config.get("run_dir") is not None or resume or RUN_DIR_ENV in os.environ:
        yield
        return
    with new_folder(Path("runs", str(config.name)).resolve(), time_stamp()) as run_dir:
        os.environ[RUN_DIR_ENV] = str(run_dir)
        try:
            yield
        finally:
            os.environ.pop(RUN_DIR_ENV, None)  # a later run of this process gets a folder of its own
