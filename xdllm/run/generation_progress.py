"""A line on stderr now and then while ``generate`` / ``eval`` run, so a long generation is not
silent: at most one every :data:`PROGRESS_EVERY_SECONDS`, after a batch, none for a generation
shorter than that. It reads only host-side counts (samples, batches, and the generated tokens,
which the summary counts anyway): no device synchronisation of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

PROGRESS_EVERY_SECONDS = 10.0


class GenerationProgress:
    """Call :meth:`batch_done` after each batch with the running totals. ``earlier_seconds``: the
    time a resumed generation spent before it stopped, counted in as its totals are."""

    def __init__(self, every_seconds: float | None = None, clock: Callable[[], float] = time.perf_counter,
                 earlier_seconds: float = 0.0) -> None:
        self.every_seconds = PROGRESS_EVERY_SECONDS if every_seconds is None else every_seconds
        self.clock = clock
        self.last = clock()
        self.started = self.last - earlier_seconds

    def batch_done(self, samples: int, batches: int, tokens: int) -> None:
        now = self.clock()
        if now - self.last < self.every_seconds:
            return
        self.last = now
        elapsed = now - self.started
        log.info("generated %d samples (%d %s) in %.0f s, %.0f tokens/s", samples, batches,
                 "batch" if batches == 1 else "batches", elapsed, tokens / max(elapsed, 1e-9))
