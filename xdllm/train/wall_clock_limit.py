"""``trainer.max_time``: a wall-clock limit of one training process, for jobs with a time limit.

At the limit the run ends after its current optimizer step, saves ``last.ckpt`` and says how to
continue (``resume=``), as a run stopped by a signal does. The limit is the process's own: a
resumed run gets the whole of it again. (Lightning's ``Timer``, which ``max_time`` otherwise
builds, restores the time spent from the checkpoint, so a run resumed with the limit it was
stopped by stopped again at once, without a word.)
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Timer

from xdllm.errors import XdllmError

FORMAT = "DD:HH:MM:SS (00:04:00:00: four hours)"


class WallClockLimit(Timer):
    """Lightning's ``Timer`` counting this process's training time only."""

    def __init__(self, max_time: str) -> None:
        try:
            super().__init__(duration=max_time, interval="step", verbose=False)
        except (TypeError, ValueError, MisconfigurationException) as error:
            raise XdllmError(f"trainer.max_time={max_time!r} is not a duration: give {FORMAT}") from error
        if not self.time_remaining() > 0:  # before the fit: the whole limit
            raise XdllmError(f"trainer.max_time={max_time!r} must be longer than zero: give {FORMAT}")
        self.max_time = max_time

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The time a resumed run spent before is not this process's: nothing is restored."""

    def stopped(self, trainer: L.Trainer, max_steps: int) -> bool:
        """Whether the limit ended the fit before ``max_steps``."""
        return trainer.global_step < max_steps and self.time_remaining() <= 0


def wall_clock_limit(max_time: object) -> WallClockLimit | None:
    """The callback for ``trainer.max_time`` (None: no limit)."""
    if max_time is None:
        return None
    if not isinstance(max_time, str):  # Hydra reads 10 or 1.5 as numbers
        raise XdllmError(f"trainer.max_time={max_time!r} is not a duration: give {FORMAT}")
    return WallClockLimit(max_time)
