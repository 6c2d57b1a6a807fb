"""How often a revised token fixed an error, read from denoising-history files.

A *revision* is a step that writes a token (not a mask, not padding) where another token was
written before: what a uniform-noise predictor does when it re-predicts a block, and what a
remasking predictor does when it rewrites a position it had *taken back* (masked again); plain
masked diffusion never does it (a token appears once, at its commit). A position is *revised*
when it had at least one revision; against the sample's target (through its first EOS), a
revised position is *fixed* when its first written token was wrong and its final one right,
*broken* when the first was right and the final wrong. ``taken_back`` counts the steps that
masked a written token again.

``xdllm history revisions PATH...`` prints the totals as JSON (:mod:`xdllm.cli.history`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import torch

from xdllm.history.reader import SampleHistory


@dataclass
class RevisionCounts:
    """Totals over samples; see the module docstring for the definitions."""

    samples: int = 0
    denoising_steps: int = 0
    taken_back: int = 0
    revisions: int = 0
    revised_positions: int = 0
    scored_revised_positions: int = 0
    fixed: int = 0
    broken: int = 0

    def add(self, sample: SampleHistory) -> None:
        self.samples += 1
        self.denoising_steps += sample.num_steps
        if sample.num_steps == 0:
            return
        canvas = sample.canvas
        every = torch.cat([sample.initial_canvas[None], canvas])
        is_token = torch.ones_like(every, dtype=torch.bool)
        for special in (sample.mask_token_id, sample.pad_token_id):
            if special is not None:
                is_token &= every != special
        order = torch.arange(every.shape[0])[:, None]
        last_token_at = torch.where(is_token, order, -1).cummax(0).values[:-1]  # before each step
        last_token = every.gather(0, last_token_at.clamp(min=0))
        revision = is_token[1:] & (last_token_at >= 0) & (canvas != last_token)
        self.taken_back += int(sample.taken_back.sum())
        revised = revision.any(0)
        self.revisions += int(revision.sum())
        self.revised_positions += int(revised.sum())
        length = sample.reference_length
        if length is None:
            return
        scored = min(length, canvas.shape[1])
        target = sample.target_ids[:scored]
        written = ~sample.masked[:, :scored]
        first_step = written.int().argmax(0)  # the first step that wrote a token there
        first = canvas[:, :scored].gather(0, first_step[None])[0]
        final = canvas[-1, :scored]
        revised = revised[:scored]
        self.scored_revised_positions += int(revised.sum())
        self.fixed += int((revised & (first != target) & (final == target)).sum())
        self.broken += int((revised & (first == target) & (final != target)).sum())

    def summary(self) -> dict[str, float | int]:
        """The totals, revisions per sample and the fixed / broken shares of revised positions."""
        per_sample = self.revisions / max(self.samples, 1)
        scored = max(self.scored_revised_positions, 1)
        return {**asdict(self), "revisions_per_sample": per_sample,
                "mean_denoising_steps": self.denoising_steps / max(self.samples, 1),
                "fixed_share": self.fixed / scored, "broken_share": self.broken / scored}


def count_revisions(samples: Iterable[SampleHistory]) -> RevisionCounts:
    counts = RevisionCounts()
    for sample in samples:
        counts.add(sample)
    return counts

