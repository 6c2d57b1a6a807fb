"""``HistoryTopKPlugin``: the history recorder the predictor calls at every denoising step.

Per sample and step it keeps the top-k token ids and probabilities over the output region, the
canvas after the step, the positions committed at that step and the confidence of each commit;
per position, the step and confidence of its (last) commit. The predictor computes the top-k
(the recorder's ``k``) on its output window. A step costs one device copy per tensor kept and
never waits for the device; placing window offsets at the columns of the recorded region, the
commit of every position and the move to the host (one copy) happen once per batch, in
:meth:`HistoryTopKPlugin.end`, which writes one file per generation batch (see
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

from xdllm.data.tokenizer import token_display
from xdllm.errors import XdllmError
from xdllm.history.format import FORMAT_NAME, FORMAT_VERSION, HistoryError
from xdllm.history.storage import history_file_name, next_file_index, write_history_file
from xdllm.interfaces import DenoisingStep, PredictionDict, Tokenizer


def check_history_k(k: int, tokenizer: Tokenizer, option: str) -> None:
    """Before a run: a recorded step keeps the top ``k`` tokens of each position, at most the
    vocabulary (the predictor refuses more only once it records); ``option`` names ``k`` as the
    caller took it."""
    if k > tokenizer.vocab_size:
        raise XdllmError(f"{option}={k} is more than the tokenizer's {tokenizer.vocab_size} tokens, the most a step's "
                         f"top-k can hold: set {option} to at most {tokenizer.vocab_size}")


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
        self.first_index = next_file_index(self.output_dir)  # of this recorder's files, one per batch
        self._next_index = self.first_index
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
        """Keep this step's top-k, canvas and commits: device copies, no host work."""
        if self._skipping:
            return
        if self._batch is None:
            raise HistoryError("HistoryTopKPlugin.on_step called before begin()")
        self._batch.record(state, self.k)

    def end(self, prediction: PredictionDict) -> None:
        """Place the batch's steps, move them to the host in one copy and write the file."""
        if self._skipping:
            self._skipping = False
            return
        if self._batch is None:
            raise HistoryError("HistoryTopKPlugin.end called before begin()")
        with torch.autocast(prediction["ids"].device.type, enabled=False):  # stacking float16 top-k
            payload = self._batch.finish(prediction, self.k)  # is bookkeeping, not a caller's autocast op
        payload.update(_token_strings(payload, self.tokenizer))
        payload.update(_end_ids(self.tokenizer), split=self.split)
        path = self.output_dir / history_file_name(self._next_index)
        write_history_file(payload, path)
        self.files_written.append(path)
        self._next_index += 1
        self.samples_recorded += int(payload["sample_ids"].shape[0])
        self._batch = None


class _BatchRecording:
    """The per-step tensors of one batch, kept on the predictor's device until ``finish``.

    A step is kept as handed over, on the output window: one copy per tensor (converted to the
    stored dtype on the way), nothing else, so recording costs a step a handful of device copies
    and no host work. Placing window offsets at the recorded columns, the commit step and
    confidence of every position, and the move to the host happen once per batch in ``finish``.
    """

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
        self.window_valid: Tensor | None = None
        self.steps: list[int] = []
        self.topk_ids: list[Tensor] = []
        self.topk_probs: list[Tensor] = []
        self.canvas: list[Tensor] = []
        self.committed: list[Tensor] = []
        self.confidence: list[Tensor] = []
        self.active: list[Tensor] = []

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
        """Keep a copy of the step's window values and canvas (device copies only)."""
        self._check(state, k)
        rows = self.rows
        if self.window_valid is None:  # the layout of the windows: fixed for the batch
            self.window_valid = state.window_valid[:rows].clone()
        self.steps.append(state.step)
        self.topk_ids.append(state.topk_ids[:rows].to(torch.int32, copy=True))
        self.topk_probs.append(state.topk_probs[:rows].to(torch.float16, copy=True))
        self.canvas.append(state.canvas[:rows, self.region_start:].to(torch.int32, copy=True))
        self.committed.append(state.committed[:rows].to(torch.bool, copy=True))
        self.confidence.append(state.confidence[:rows].to(torch.float32, copy=True))
        self.active.append(state.active[:rows].to(torch.bool, copy=True))

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

    def _placed_steps(self, k: int) -> dict[str, Tensor]:
        """Every step's values at the recorded columns, ``[B, S, R, ...]`` (the confidence only
        where the step committed), and per position the step and confidence of its last commit;
        on the device, in a few batched operations."""
        region = self.canvas_len - self.region_start
        if not self.steps:
            device = self.initial_canvas.device
            return {"topk_ids": torch.zeros((self.rows, 0, region, k), dtype=torch.int32, device=device),
                    "topk_probs": torch.zeros((self.rows, 0, region, k), dtype=torch.float16, device=device),
                    "canvas": torch.zeros((self.rows, 0, region), dtype=torch.int32, device=device),
                    "committed": torch.zeros((self.rows, 0, region), dtype=torch.bool, device=device),
                    "active": torch.zeros((self.rows, 0), dtype=torch.bool, device=device),
                    "commit_step": torch.full((self.rows, region), -1, dtype=torch.int64, device=device),
                    "confidence_at_commit": torch.full((self.rows, region), float("nan"), device=device),
                    "step_confidence": torch.zeros((self.rows, 0, region), device=device)}
        assert self.window_valid is not None
        index, inside = self._region_columns(self.window_valid)
        committed = _take_columns(torch.stack(self.committed, dim=1), index, inside)
        confidence = _take_columns(torch.stack(self.confidence, dim=1), index, inside)
        order = torch.arange(len(self.steps), device=committed.device)[None, :, None]
        last = torch.where(committed, order, -1).amax(dim=1)  # the last step that committed
        steps = torch.tensor(self.steps, dtype=torch.int64).to(committed.device, non_blocking=True)
        return {
            "topk_ids": _take_columns(torch.stack(self.topk_ids, dim=1), index, inside),
            "topk_probs": _take_columns(torch.stack(self.topk_probs, dim=1), index, inside),
            "canvas": torch.stack(self.canvas, dim=1),
            "committed": committed,
            "active": torch.stack(self.active, dim=1),
            "commit_step": torch.where(last >= 0, steps[last.clamp_min(0)], -1),
            "confidence_at_commit": torch.where(
                last >= 0, confidence.gather(1, last.clamp_min(0)[:, None]).squeeze(1), float("nan")),
            "step_confidence": confidence.masked_fill(~committed, float("nan")),
        }

    def finish(self, prediction: PredictionDict, k: int) -> dict[str, Any]:
        recorded = {**self._placed_steps(k), "initial_canvas": self.initial_canvas}
        ids = prediction["ids"]
        if ids.shape[1] == self.canvas_len:  # the output the evaluator scores, on the same columns
            recorded["output_ids"] = ids[: self.rows, self.region_start:].to(torch.int32)
        placed = _to_host(recorded)
        texts = list(prediction["text"][: self.rows])
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "k": k,
            "region_start": self.region_start,
            "canvas_len": self.canvas_len,
            "steps": torch.tensor(self.steps, dtype=torch.int64),
            "num_steps": placed["active"].sum(dim=1),
            **placed,
            "texts": texts,
            **self.static,
        }


def _take_columns(window: Tensor, index: Tensor, inside: Tensor) -> Tensor:
    """``window[b, s, index[b, c], ...]`` where ``inside[b, c]``, else zero (False): the
    per-offset values ``[B, S, W, ...]`` of every step at the recorded columns ``[B, S, R, ...]``."""
    steps = window.shape[1]
    index = index[:, None].expand(-1, steps, -1)
    inside = inside[:, None]
    if window.dim() == 4:
        index = index[..., None].expand(-1, -1, -1, window.shape[-1])
        inside = inside[..., None]
    return window.gather(2, index).masked_fill(~inside, 0)


def _to_host(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """The tensors on the host after one device-to-host copy: their bytes are concatenated on
    the device (widest elements first, so every piece stays aligned), copied once, then cut and
    viewed back into each tensor, each its own storage (``torch.save`` refuses one storage
    viewed as several dtypes)."""
    names = sorted(tensors, key=lambda name: -tensors[name].element_size())
    pieces = [tensors[name].contiguous().reshape(-1).view(torch.uint8) for name in names]
    host = torch.cat(pieces).cpu()
    placed, offset = {}, 0
    for name, piece in zip(names, pieces):
        tensor = tensors[name]
        placed[name] = host[offset:offset + piece.numel()].view(tensor.dtype).view(tensor.shape).clone()
        offset += piece.numel()
    return placed


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
        "vocab_tokens": list(map(token_display(tokenizer), ids.tolist())),
    }
