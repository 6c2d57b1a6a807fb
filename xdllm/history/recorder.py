"""``HistoryTopKPlugin``: the history recorder the predictor calls at every denoising step.

Per sample and step it keeps the top-k token ids and probabilities over the output region, the
canvas after the step and the positions committed at that step; per position, the step and
confidence of its (last) commit. The predictor computes the top-k (the recorder's ``k``) on its
output window; the recorder places window offsets at the columns of the recorded region. Step
work stays on the predictor's device and never waits for it (gathers, copies and
``torch.where``); tensors are stacked and moved to the host once, in
:meth:`HistoryTopKPlugin.end`, and written as one file per generation batch (see
:mod:`xdllm.history.format`).

One file per batch, rather than one per run: each file is complete and atomic the moment its
batch ends, so an interrupted generation keeps everything it finished; memory stays bounded by
one batch; and the predictor protocol has no "close" call to rely on. Steps are stacked inside
a file, so the file count is samples / batch size whatever the number of steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Integer
from torch import Tensor

from xdllm.history.format import FORMAT_NAME, FORMAT_VERSION, HistoryError
from xdllm.history.storage import history_file_name, next_file_index, write_history_file
from xdllm.interfaces import DenoisingStep, PredictionDict, Tokenizer


class HistoryTopKPlugin:
    """Records the top-``k`` alternatives of every denoising step into ``output_dir``.

    Args:
        k: number of alternatives kept per position and step (read by the predictor, which
            hands over exactly this many).
        output_dir: directory receiving ``history-NNNNN.pt`` files (created when needed;
            numbering continues after files already there, nothing is overwritten).
        max_samples: stop recording after this many samples (``None``: record all). A batch
            that crosses the limit is recorded for its first rows only.
        tokenizer: when given, the token strings of every id that appears in a file are stored
            in it, its mask token id marks masked positions for viewers, and its EOS and pad
            ids let viewers score outputs against targets as the evaluator does.
        mask_token_id: mask id to store when there is no tokenizer.
        split: what the prompts are (``"validation"``, ``"test"``, ...), stored in every file;
            views name their TensorBoard tags after it.
    """

    def __init__(
        self,
        k: int = 5,
        *,
        output_dir: str | Path,
        max_samples: int | None = None,
        tokenizer: Tokenizer | None = None,
        mask_token_id: int | None = None,
        split: str | None = None,
    ) -> None:
        if k < 1:
            raise ValueError(f"HistoryTopKPlugin: k must be >= 1, got {k}")
        if max_samples is not None and max_samples < 0:
            raise ValueError(f"HistoryTopKPlugin: max_samples must be >= 0, got {max_samples}")
        self.k = k
        self.output_dir = Path(output_dir)
        self.max_samples = max_samples
        self.tokenizer = tokenizer
        self.mask_token_id = tokenizer.mask_token_id if tokenizer is not None else mask_token_id
        self.split = split
        self.files_written: list[Path] = []
        self.samples_recorded = 0
        self._next_index = next_file_index(self.output_dir)
        self._batch: _BatchRecording | None = None
        self._skipping = False

    def begin(
        self,
        batch: Mapping[str, Any],
        canvas: Integer[Tensor, "batch seq_len"],
        output_start: Integer[Tensor, " batch"],
    ) -> None:
        """Start recording a batch (one host sync, to fix the output region's start)."""
        remaining = None if self.max_samples is None else self.max_samples - self.samples_recorded
        self._skipping = remaining is not None and remaining <= 0
        if self._skipping:
            self._batch = None
            return
        rows = canvas.shape[0] if remaining is None else min(canvas.shape[0], remaining)
        self._batch = _BatchRecording.start(
            batch, canvas[:rows], output_start[:rows], self.samples_recorded, self.mask_token_id
        )

    def on_step(self, state: DenoisingStep) -> None:
        """Append this step's top-k, canvas and commits; no host synchronisation."""
        if self._skipping:
            return
        if self._batch is None:
            raise HistoryError("HistoryTopKPlugin.on_step called before begin()")
        self._batch.record(state, self.k)

    def end(self, prediction: PredictionDict) -> None:
        """Stack the batch's steps, move them to the host and write the batch's file."""
        if self._skipping:
            self._skipping = False
            return
        if self._batch is None:
            raise HistoryError("HistoryTopKPlugin.end called before begin()")
        payload = self._batch.finish(prediction, self.k)
        payload.update(_token_strings(payload, self.tokenizer))
        payload.update(_end_ids(self.tokenizer), split=self.split)
        path = self.output_dir / history_file_name(self._next_index)
        write_history_file(payload, path)
        self.files_written.append(path)
        self._next_index += 1
        self.samples_recorded += int(payload["sample_ids"].shape[0])
        self._batch = None


class _BatchRecording:
    """The per-step tensors of one batch, kept on the predictor's device until ``finish``."""

    def __init__(
        self,
        rows: int,
        region_start: int,
        canvas_len: int,
        output_start: Tensor,
        static: dict[str, Any],
        initial_canvas: Tensor,
    ) -> None:
        self.rows = rows
        self.region_start = region_start
        self.canvas_len = canvas_len
        # per row, the window offset of every recorded column: column c is canvas position
        # region_start + c, i.e. offset region_start + c - output_start of the row's window
        self.offset = (torch.arange(canvas_len - region_start, device=output_start.device)
                       + region_start - output_start[:, None])
        self.static = static
        self.initial_canvas = initial_canvas
        self.steps: list[int] = []
        self.topk_ids: list[Tensor] = []
        self.topk_probs: list[Tensor] = []
        self.canvas: list[Tensor] = []
        self.committed: list[Tensor] = []
        self.active: list[Tensor] = []
        shape = initial_canvas.shape
        self.commit_step = torch.full(shape, -1, dtype=torch.int64, device=initial_canvas.device)
        self.confidence_at_commit = torch.full(
            shape, float("nan"), dtype=torch.float32, device=initial_canvas.device
        )

    @classmethod
    def start(
        cls,
        batch: Mapping[str, Any],
        canvas: Tensor,
        output_start: Tensor,
        first_sample_id: int,
        mask_token_id: int | None,
    ) -> _BatchRecording:
        rows, canvas_len = canvas.shape
        region_start = int(output_start.min()) if rows else canvas_len
        static = {
            "sample_ids": _sample_ids(batch, rows, first_sample_id),
            "output_start": output_start.detach().to("cpu", torch.int64),
            **_prompt(batch, rows, mask_token_id),
            "target_ids": _rows_or_none(batch.get("target_ids"), rows),
            "mask_token_id": mask_token_id,
        }
        initial = canvas[:, region_start:].to(torch.int32, copy=True)
        return cls(rows, region_start, canvas_len, output_start, static, initial)

    def record(self, state: DenoisingStep, k: int) -> None:
        """Append the step, its window values placed at the recorded columns (device work only)."""
        self._check(state, k)
        rows = self.rows
        index, inside = self._region_columns(state.window_valid[:rows])
        committed = _take_columns(state.committed[:rows], index, inside)
        self.steps.append(state.step)
        self.topk_ids.append(_take_columns(state.topk_ids[:rows], index, inside).to(torch.int32))
        self.topk_probs.append(
            _take_columns(state.topk_probs[:rows], index, inside).to(torch.float16)
        )
        self.canvas.append(state.canvas[:rows, self.region_start:].to(torch.int32, copy=True))
        self.committed.append(committed)
        self.active.append(state.active[:rows].clone())
        self.commit_step = torch.where(committed, state.step, self.commit_step)
        self.confidence_at_commit = torch.where(
            committed,
            _take_columns(state.confidence[:rows], index, inside).float(),
            self.confidence_at_commit,
        )

    def _check(self, state: DenoisingStep, k: int) -> None:
        """Shapes only (no device values): the step must fit what ``begin`` and ``k`` fixed."""
        if state.topk_ids.shape[-1] != k:
            raise HistoryError(
                f"HistoryTopKPlugin: step {state.step} hands over the top "
                f"{state.topk_ids.shape[-1]} tokens per position, the recorder keeps k={k} "
                "(the predictor must compute the recorder's k)"
            )
        if state.canvas.shape[1] != self.canvas_len:
            raise HistoryError(
                f"HistoryTopKPlugin: step {state.step} canvas has length {state.canvas.shape[1]}, "
                f"begin() had {self.canvas_len}"
            )

    def _region_columns(self, window_valid: Tensor) -> tuple[Tensor, Tensor]:
        """For every recorded column of every row: the window offset it reads (clamped into
        the window) and whether that offset is a real position of the row's region."""
        width = window_valid.shape[1]
        index = self.offset.clamp(0, max(width - 1, 0))
        inside = (self.offset >= 0) & (self.offset < width) & window_valid.gather(1, index)
        return index, inside

    def finish(self, prediction: PredictionDict, k: int) -> dict[str, Any]:
        region = self.canvas_len - self.region_start
        texts = list(prediction["text"][: self.rows])
        active = _stack(self.active, (self.rows,), torch.bool)
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "k": k,
            "region_start": self.region_start,
            "canvas_len": self.canvas_len,
            "steps": torch.tensor(self.steps, dtype=torch.int64),
            "active": active,
            "num_steps": active.sum(dim=1),
            "topk_ids": _stack(self.topk_ids, (self.rows, region, k), torch.int32),
            "topk_probs": _stack(self.topk_probs, (self.rows, region, k), torch.float16),
            "canvas": _stack(self.canvas, (self.rows, region), torch.int32),
            "committed": _stack(self.committed, (self.rows, region), torch.bool),
            "initial_canvas": self.initial_canvas.cpu(),
            "commit_step": self.commit_step.cpu(),
            "confidence_at_commit": self.confidence_at_commit.cpu(),
            "texts": texts,
            **self.static,
        }


def _take_columns(window: Tensor, index: Tensor, inside: Tensor) -> Tensor:
    """``window[b, index[b, c], ...]`` where ``inside[b, c]``, else zero (False): per-offset
    values ``[B, W, ...]`` of the output window at the recorded columns ``[B, R, ...]``."""
    if window.dim() == 3:
        index = index[..., None].expand(-1, -1, window.shape[-1])
        inside = inside[..., None]
    return window.gather(1, index).masked_fill(~inside, 0)


def _stack(steps: list[Tensor], row_shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    """Stack per-step ``[B, ...]`` tensors into ``[B, S, ...]`` on the host."""
    if not steps:
        return torch.empty((row_shape[0], 0, *row_shape[1:]), dtype=dtype)
    return torch.stack(steps, dim=1).cpu()


def _sample_ids(batch: Mapping[str, Any], rows: int, first_sample_id: int) -> Tensor:
    """The batch's ``sample_index`` when it has one, else a running count over the run."""
    given = batch.get("sample_index")
    if given is None:
        return torch.arange(first_sample_id, first_sample_id + rows, dtype=torch.int64)
    return given[:rows].detach().to("cpu", torch.int64)


def _prompt(batch: Mapping[str, Any], rows: int, mask_token_id: int | None) -> dict[str, Tensor]:
    """The batch's prompt ids and a mask of real prompt tokens (padding and masks excluded)."""
    ids = batch.get("input_ids")
    if ids is None:
        return {
            "prompt_ids": torch.zeros((rows, 0), dtype=torch.int64),
            "prompt_mask": torch.zeros((rows, 0), dtype=torch.bool),
        }
    ids = ids[:rows].detach().to("cpu", torch.int64)
    mask = batch.get("attention_mask")
    mask = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask[:rows].cpu().bool()
    if mask_token_id is not None:
        mask = mask & (ids != mask_token_id)
    return {"prompt_ids": ids, "prompt_mask": mask}


def _rows_or_none(value: Tensor | None, rows: int) -> Tensor | None:
    return None if value is None else value[:rows].detach().to("cpu", torch.int64)


def _end_ids(tokenizer: Tokenizer | None) -> dict[str, int | None]:
    """EOS and pad ids, so viewers score outputs against targets as the evaluator does."""
    if tokenizer is None:
        return {"eos_token_id": None, "pad_token_id": None}
    return {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}


def _token_strings(payload: Mapping[str, Any], tokenizer: Tokenizer | None) -> dict[str, Any]:
    """Strings of every token id the file mentions, so it can be read without the tokenizer."""
    if tokenizer is None:
        return {"vocab_ids": torch.zeros(0, dtype=torch.int64), "vocab_tokens": []}
    mentioned = [
        payload[name].reshape(-1).to(torch.int64)
        for name in ("topk_ids", "canvas", "initial_canvas", "prompt_ids", "target_ids")
        if payload.get(name) is not None
    ]
    ids = torch.cat(mentioned)
    ids = ids[(ids >= 0) & (ids < tokenizer.vocab_size)]
    # a histogram over the vocabulary: much faster than torch.unique on CPU
    ids = torch.bincount(ids, minlength=tokenizer.vocab_size).nonzero().flatten()
    return {
        "vocab_ids": ids,
        "vocab_tokens": [tokenizer.id_to_token(i) for i in ids.tolist()],
    }
