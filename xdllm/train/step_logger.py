"""The run's TensorBoard logger, writing at the optimizer steps done.

Lightning hands its loggers the number of optimizer steps done *before* the step that logged:
the training scalars of step 20, the learning rate of step 20 and the validation after step 20
all arrive as step 19. The console, the checkpoints (``step0000020.ckpt``), the history folders
and the generation scalars count steps done (20), so this logger writes at ``step + 1``, the one
place every scalar passes through. Lightning's ``epoch`` scalar is left out: a run reads one
endless training stream, so it is 0 throughout. Its event file is made in a later second than
the files already in its folder, so TensorBoard reads a resumed run's after them
(:func:`~xdllm.event_files.after_the_event_files_in`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from xdllm.event_checksums import use_fast_event_checksums
from xdllm.event_files import after_the_event_files_in


class OptimizerStepLogger(TensorBoardLogger):
    """A :class:`TensorBoardLogger` whose scalars sit at the optimizer steps done, its records
    checksummed in C (:mod:`xdllm.event_checksums`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        use_fast_event_checksums()
        super().__init__(*args, **kwargs)

    @property
    def experiment(self) -> Any:
        if self._experiment is None and rank_zero_only.rank == 0:  # the process that makes the file
            after_the_event_files_in(self.log_dir)
        return super().experiment

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        scalars = {name: value for name, value in metrics.items() if name != "epoch"}
        super().log_metrics(scalars, None if step is None else step + 1)
