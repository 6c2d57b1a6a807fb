"""Notebook-facing access to recorded histories: ``load_history(path).sample(i)``.

A :class:`HistoryFile` is one validated file (one generation batch); :class:`SampleHistory` is
one sample's denoising cut down to the steps it actually ran and to its own output region.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.counted import shortened
from xdllm.history.format import HistoryError
from xdllm.history.storage import find_history_files, read_history_file
from xdllm.predict.metrics import reference_lengths


@dataclass(frozen=True)
class SampleHistory:
    """One sample's denoising, step by step.

    ``steps`` are the predictor's step numbers of the steps this sample ran (rows that had
    finished are not listed). Region columns are canvas positions ``output_start + j``.

    Attributes:
        sample_id: the sample's index in its prediction stream.
        output_start: canvas position of region column 0.
        steps: step numbers, ``[S]``.
        topk_ids: top-k token ids per step and position, best first, ``[S, R, k]``.
        topk_probs: their probabilities under the distribution the step sampled from.
        canvas: the canvas after each step, ``[S, R]``.
        committed: positions unmasked at each step, ``[S, R]`` (which changed: :attr:`changed`).
        initial_canvas: the region before the first step, ``[R]``.
        commit_step: step number of each position's commit, -1 if never committed, ``[R]``.
        confidence_at_commit: the predictor's confidence score at the position's last commit
            (NaN if never committed).
        prompt_ids: the prompt tokens without padding.
        target_ids: the reference continuation (right-padded as in the batch), if known.
        text: the predictor's decoded output, if recorded.
        mask_token_id: the mask id, if known.
        vocab: token strings for the ids in this file (empty without a tokenizer).
        eos_token_id, pad_token_id: the tokenizer's ids, if known (they bound the scored
            part of the target, see :attr:`reference_length`).
        split: what the prompts were (``"validation"``, ``"test"``, ...), if recorded.
        output_ids: the predictor's output (``ids`` in ``predictions.jsonl``, which the
            evaluator scores), if recorded: the last canvas, except that a predictor may pad
            what it never generated or what follows its first EOS after its last step.
        step_confidence: the confidence score of every commit at its step, NaN where the step
            committed nothing, ``[S, R]``; ``None`` where not given (see
            :attr:`commit_confidence`).
    """

    sample_id: int
    output_start: int
    steps: Integer[Tensor, " steps"]
    topk_ids: Integer[Tensor, "steps region k"]
    topk_probs: Float[Tensor, "steps region k"]
    canvas: Integer[Tensor, "steps region"]
    committed: Bool[Tensor, "steps region"]
    initial_canvas: Integer[Tensor, " region"]
    commit_step: Integer[Tensor, " region"]
    confidence_at_commit: Float[Tensor, " region"]
    prompt_ids: Integer[Tensor, " prompt"]
    target_ids: Integer[Tensor, " target"] | None
    text: str | None
    mask_token_id: int | None
    vocab: dict[int, str]
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    split: str | None = None
    output_ids: Integer[Tensor, " region"] | None = None
    step_confidence: Float[Tensor, "steps region"] | None = None

    @property
    def num_steps(self) -> int:
        return int(self.steps.shape[0])

    @property
    def k(self) -> int:
        return int(self.topk_ids.shape[-1])

    @property
    def masked(self) -> Bool[Tensor, "steps region"]:
        """Masked positions after each step.

        With a known mask id: canvas tokens equal to it. Without one: positions committed at a
        later step (a position never committed counts as unmasked).
        """
        if self.mask_token_id is not None:
            return self.canvas == self.mask_token_id
        return self.commit_step.unsqueeze(0) > self.steps.unsqueeze(1)

    @property
    def masks_remaining(self) -> Integer[Tensor, " steps"]:
        """Number of masked region positions after each step."""
        return self.masked.sum(dim=1)

    @property
    def tokens_committed(self) -> Integer[Tensor, " steps"]:
        """Number of region positions committed at each step."""
        return self.committed.sum(dim=1)

    @property
    def commit_confidence(self) -> Float[Tensor, "steps region"]:
        """The confidence score of every commit at its step, NaN where the step committed
        nothing. A position committed, taken back by a remasking predictor and committed again
        has a score at each commit. Files written before these were stored keep only the last
        commit's score (:attr:`confidence_at_commit`); an earlier commit there reads NaN."""
        if self.step_confidence is not None:
            return self.step_confidence
        last_commit = self.committed & (self.commit_step[None, :] == self.steps[:, None])
        return torch.where(last_commit, self.confidence_at_commit[None, :], float("nan"))

    @property
    def canvas_before(self) -> Integer[Tensor, "steps region"]:
        """The canvas before each step: the initial canvas, then the canvas after each step
        but the last."""
        return torch.cat([self.initial_canvas[None], self.canvas[:-1]])

    @property
    def changed(self) -> Bool[Tensor, "steps region"]:
        """Positions whose token differs from the canvas before the step (after the previous
        step this sample ran, or the initial canvas). In masked diffusion these are the commits
        (and padding after a settled EOS)."""
        return self.canvas != self.canvas_before

    @property
    def rewritten(self) -> Bool[Tensor, "steps region"]:
        """Positions changed to a token (not a mask, not padding) without being committed at
        the step: what a predictor that revises its canvas (uniform noise) writes between
        commits. Never set in masked diffusion, where a token appears only when committed."""
        written = self.changed & ~self.committed & ~self.masked
        return written if self.pad_token_id is None else written & (self.canvas != self.pad_token_id)

    @property
    def taken_back(self) -> Bool[Tensor, "steps region"]:
        """Positions masked again at the step after holding a token: what a remasking predictor
        (``remask=true``) does to the tokens it trusts least. Never set otherwise."""
        if self.mask_token_id is None:
            return torch.zeros_like(self.committed)
        return (self.canvas == self.mask_token_id) & (self.canvas_before != self.mask_token_id)

    @property
    def tokens_changed(self) -> Integer[Tensor, " steps"]:
        """Number of region positions whose token changed at each step."""
        return self.changed.sum(dim=1)

    @property
    def reference_length(self) -> int | None:
        """Target positions that are scored, as for exact match (``xdllm.predict.metrics``):
        through the first EOS, else up to the first pad; the whole target row when those ids
        are unknown. ``None`` without a target."""
        if self.target_ids is None:
            return None
        if self.eos_token_id is None or self.pad_token_id is None:
            return int(self.target_ids.shape[0])
        return int(reference_lengths(self.target_ids[None], self.eos_token_id, self.pad_token_id)[0])

    @property
    def wrong(self) -> Bool[Tensor, "steps region"] | None:
        """Scored positions whose token differs from the target, after each step (``None``
        without a target). Unscored positions are never wrong, nor are masked ones while the
        sample still runs. The last row scores the output as the evaluator does
        (:attr:`output_ids` when recorded, else the last canvas): a position never generated
        (still masked, e.g. after an early EOS) is wrong."""
        length = self.reference_length
        if length is None:
            return None
        scored = min(length, self.canvas.shape[1])
        target = torch.full_like(self.canvas[0], -1)
        target[:scored] = self.target_ids[:scored]
        in_reference = torch.arange(self.canvas.shape[1]) < scored
        wrong = ~self.masked & in_reference & (self.canvas != target)
        if self.num_steps:
            final = self.canvas[-1] if self.output_ids is None else self.output_ids
            wrong[-1] = in_reference & (final != target)
        return wrong

    @property
    def correct_tokens(self) -> int | None:
        """Target tokens the output gets right, counted as the evaluator counts them
        (``correct_tokens`` in ``predictions.jsonl``, :mod:`xdllm.predict.metrics`): target
        positions past the end of the output region are wrong. ``None`` without a target or
        without steps."""
        if self.target_ids is None or not self.num_steps:
            return None
        scored = min(self.reference_length, self.canvas.shape[1])
        return scored - int(self.wrong[-1].sum())

    def token(self, token_id: int) -> str:
        """The stored string of a token id, or the id itself when no tokenizer was given."""
        return self.vocab.get(int(token_id), str(int(token_id)))

    def __repr__(self) -> str:
        """One line for a notebook: which sample, its size and output (the tensors print on their
        own: ``s.canvas``, ``s.topk_probs``)."""
        split = "" if self.split is None else f", split={self.split!r}"
        text = "" if self.text is None else f", text={shortened(self.text, REPR_TEXT_CHARS)!r}"
        return (f"SampleHistory(sample_id={self.sample_id}{split}, steps={self.num_steps}, "
                f"region={self.canvas.shape[1]}, k={self.k}, prompt_tokens={len(self.prompt_ids)}{text})")


REPR_TEXT_CHARS = 60
"""Characters of an output shown in a sample's one-line description."""


class HistoryFile:
    """One validated history file. ``len(file)`` samples; ``file.sample(i)`` the i-th."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._data = read_history_file(self.path)
        self._vocab = dict(zip(self._data["vocab_ids"].tolist(), self._data["vocab_tokens"]))

    def __len__(self) -> int:
        return int(self._data["sample_ids"].shape[0])

    def __repr__(self) -> str:
        return f"HistoryFile('{self.path}', samples={len(self)}, k={self.k})"

    def __iter__(self) -> Iterator[SampleHistory]:
        return (self.sample(i) for i in range(len(self)))

    @property
    def k(self) -> int:
        return int(self._data["k"])

    @property
    def split(self) -> str | None:
        """What the prompts were: as recorded, else ``"validation"`` for a ``val-step<N>``
        folder (files written before the split was stored), else ``None``."""
        recorded = self._data.get("split")
        if recorded is not None:
            return recorded
        return "validation" if self.path.parent.name.startswith("val-step") else None

    @property
    def sample_ids(self) -> list[int]:
        return self._data["sample_ids"].tolist()

    @property
    def raw(self) -> dict[str, Any]:
        """The validated payload as stored (see ``docs/history.md`` for every key)."""
        return self._data

    def sample(self, index: int) -> SampleHistory:
        """The ``index``-th sample of this file (0-based, in batch order)."""
        if not 0 <= index < len(self):
            raise HistoryError(
                f"{self.path}: sample {index} out of range (file has {len(self)} samples, "
                f"0..{len(self) - 1})"
            )
        data = self._data
        start = int(data["output_start"][index])
        column = start - int(data["region_start"])
        ran = data["active"][index]
        target = data["target_ids"]
        return SampleHistory(
            sample_id=int(data["sample_ids"][index]),
            output_start=start,
            steps=data["steps"][ran],
            topk_ids=data["topk_ids"][index, ran, column:].long(),
            topk_probs=data["topk_probs"][index, ran, column:].float(),
            canvas=data["canvas"][index, ran, column:].long(),
            committed=data["committed"][index, ran, column:],
            initial_canvas=data["initial_canvas"][index, column:].long(),
            commit_step=data["commit_step"][index, column:],
            confidence_at_commit=data["confidence_at_commit"][index, column:],
            prompt_ids=data["prompt_ids"][index][data["prompt_mask"][index]],
            target_ids=None if target is None else target[index],
            text=data["texts"][index] if data["texts"] else None,
            mask_token_id=data["mask_token_id"],
            vocab=self._vocab,
            eos_token_id=data.get("eos_token_id"),
            pad_token_id=data.get("pad_token_id"),
            split=self.split,
            output_ids=None if data.get("output_ids") is None else data["output_ids"][index, column:].long(),
            step_confidence=None if data.get("step_confidence") is None
            else data["step_confidence"][index, ran, column:],
        )


def load_history(path: Path | str) -> HistoryFile:
    """Load and validate one history file (corrupt or truncated files raise, naming the file)."""
    return HistoryFile(path)


def iter_samples(path: Path | str, max_samples: int | None = None) -> Iterator[SampleHistory]:
    """Samples of a file, a history directory or a run directory, one file in memory at a time."""
    produced = 0
    for file_path in find_history_files(path):
        for sample in load_history(file_path):
            if max_samples is not None and produced >= max_samples:
                return
            yield sample
            produced += 1
