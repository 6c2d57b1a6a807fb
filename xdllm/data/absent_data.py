"""The task of a loaded run whose data file or folder is not on this machine.

A run copied from where it trained (a cluster, a colleague) still generates from prompts given
to it (``prompts_file=``, ``xdllm.complete``) and free text (from empty prompts), which need only
the task's lengths, recorded in the run's config (``derived``). Anything that needs the run's
own samples (``xdllm eval``, generation on a held-out split of answers, ``run.datamodule()``)
gets :meth:`AbsentDataTask.missing`, which names the path and ``data_path=``.
"""

from __future__ import annotations

import random
from typing import NoReturn

from xdllm.errors import XdllmError


class AbsentDataTask:
    """Stands for task ``name`` whose data at ``path`` is absent: its lengths, no samples."""

    def __init__(self, name: str, path: str, max_prompt_len: int, max_target_len: int) -> None:
        self.name = name
        self.path = path
        self.max_prompt_len = max_prompt_len
        self.max_target_len = max_target_len

    def missing(self, needed_by: str) -> XdllmError:
        """The error for ``needed_by``, which needs the run's samples."""
        return XdllmError(f"{needed_by} needs the run's data, and task {self.name}'s task.params.path={self.path} "
                          "is not here: if it moved since training, or the run was copied from another machine, "
                          "give its place now: data_path=<folder or file> (generation from prompts_file=... or "
                          "xdllm.complete, and of free text, needs no data)")

    def generate(self, rng: random.Random) -> NoReturn:
        raise self.missing("drawing a sample")


def absent_data_task(name: str, path: str, derived: dict[str, object]) -> AbsentDataTask | None:
    """The stand-in for a run whose config records its task's lengths (``derived.max_prompt_len``,
    ``derived.max_new_tokens``); None for a run from before configs recorded the prompt length."""
    prompt, new_tokens = derived.get("max_prompt_len"), derived.get("max_new_tokens")
    if not isinstance(prompt, int) or not isinstance(new_tokens, int):
        return None
    return AbsentDataTask(name, path, prompt, new_tokens - 1)
