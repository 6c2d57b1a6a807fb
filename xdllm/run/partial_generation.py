"""What a generation has finished, kept when it stops part-way so that it can be continued.

A generation stopped by Ctrl-C, SIGTERM or an error writes, in its folder, the predictions of
the batches it finished (``predictions.partial.jsonl``) and what its summary needs of them
(``generation.partial.json``: batches, metric sums and counts, tokens, seconds).
``xdllm generate resume=<folder>`` reads both, skips those batches and generates the rest: a
sample's result depends only on the seed, its index and the step (never on its batch), so the
finished generation equals one that was never stopped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from xdllm.errors import XdllmError
from xdllm.evaluate import MetricTotals
from xdllm.interfaces import MetricSums
from xdllm.run.generation_record import parse_record_json
from xdllm.temporary_files import write_jsonl_atomically, written_atomically

PARTIAL_PREDICTIONS = "predictions.partial.jsonl"
PARTIAL_STATE = "generation.partial.json"


@dataclass
class FinishedBatches:
    """A generation's finished batches: their records and running totals. ``one_text`` and
    ``first_output`` follow whether every unprompted output so far is the first one."""

    records: list[dict[str, Any]] = field(default_factory=list)
    totals: MetricTotals = field(default_factory=MetricTotals)
    batches: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    one_text: bool = False
    first_output: torch.Tensor | None = None

    def plus(self, batches: list[FinishedBatch], seconds: float) -> FinishedBatches:
        """These batches and ``batches`` (generated in ``seconds``, after these), leaving these
        unchanged: a stop while they are counted finds either the old count or the new one."""
        whole = replace(self, records=list(self.records), totals=self.totals.copy(), seconds=self.seconds + seconds)
        for batch in batches:
            whole.records.extend(batch.records)
            whole.totals.add(batch.sums)
            whole.generated_tokens += batch.generated_tokens
            whole.batches += 1
        return whole


@dataclass(frozen=True)
class FinishedBatch:
    """One batch's records, metric sums and generated tokens. The generation loop appends each
    to a list in one call, so a stop (a signal raises between any two Python operations) finds
    every batch either kept whole or not at all: never its records without its count."""

    records: list[dict[str, Any]]
    sums: MetricSums
    generated_tokens: int


STATE_KEYS = ("batches", "samples", "totals", "generated_tokens", "seconds", "one_text", "first_output")


def write_partial(folder: Path, finished: FinishedBatches) -> Path:
    """Write the finished batches into ``folder``; return the predictions' path. The state is
    renamed into place after the predictions: when their write fails (a full disk), the pair
    written before, if any, stays whole; predictions without their state cannot be continued,
    and are refused as such."""
    state = dict(zip(STATE_KEYS, (
        finished.batches, len(finished.records), finished.totals.state(), finished.generated_tokens,
        finished.seconds, finished.one_text,
        None if finished.first_output is None else finished.first_output.tolist())))
    path = folder / PARTIAL_PREDICTIONS
    with written_atomically(folder / PARTIAL_STATE) as state_file:
        state_file.write_text(json.dumps(state))
        write_jsonl_atomically(path, finished.records)
    return path


def read_partial(folder: Path, device: torch.device) -> FinishedBatches:
    """The finished batches a stopped generation left in ``folder``; sums on ``device``."""
    missing = [name for name in (PARTIAL_STATE, PARTIAL_PREDICTIONS) if not (folder / name).is_file()]
    if missing:
        raise XdllmError(f"{folder} holds no stopped generation to continue (no {' or '.join(missing)}); "
                         "xdllm generate resume=<folder> continues a generation that was stopped part-way")
    state = parse_record_json((folder / PARTIAL_STATE).read_text(), folder / PARTIAL_STATE)
    lacking = [key for key in STATE_KEYS if not isinstance(state, dict) or key not in state]
    if lacking:
        raise XdllmError(f"{folder / PARTIAL_STATE} lacks {', '.join(lacking)}: it was edited or not written by xdllm")
    records = [parse_record_json(line, f"{folder / PARTIAL_PREDICTIONS}:{number}")
               for number, line in enumerate((folder / PARTIAL_PREDICTIONS).read_text().splitlines(), start=1)]
    if len(records) != state["samples"]:
        raise XdllmError(f"{folder / PARTIAL_PREDICTIONS} holds {len(records)} predictions, but "
                         f"{PARTIAL_STATE} says {state['samples']}: the two were not written together")
    first = state["first_output"]
    return FinishedBatches(records, MetricTotals.from_state(state["totals"], device), state["batches"],
                           state["generated_tokens"], state["seconds"], state["one_text"],
                           None if first is None else torch.tensor(first, device=device))


def remove_partial(folder: Path) -> None:
    """Once the generation has finished (its ``predictions.jsonl`` written)."""
    for name in (PARTIAL_PREDICTIONS, PARTIAL_STATE):
        (folder / name).unlink(missing_ok=True)
