"""``MDLMPredictor``: the shared unmasking engine, plus MDLM's ancestral sampler.

``sampler="confidence"`` (default) is the engine as every masked family uses it: confidence
modes, thresholds, schedules, blocks (``docs/predictor.md``).

``sampler="ancestral"`` is MDLM's ancestral sampler over ``max_steps`` time steps ``t = 1, 1 -
1/S, ..., 0`` of a noise schedule (log-linear by default): going from ``t`` to ``s`` each masked
position is revealed with probability ``(m(t) - m(s)) / m(t)`` and takes a token drawn from the
model's distribution (``temperature`` 1 samples, 0 takes the argmax). Equivalently, and this is
how it runs, every position draws once the step at which it is revealed; a step that reveals
nothing leaves the canvas, hence the model output, unchanged, so it is skipped: the model runs
only at steps that reveal something and ``steps_taken`` counts those forward passes (MDLM's
output cache, without running the empty steps at all). Draws come from the per-sample streams,
so the result does not depend on the batch. With ``block_size`` each block is its own ancestral
run over its share of the steps (``max_steps`` split over the blocks as the engine splits it:
``q`` steps each, one more for the first ``r``, ``q, r = divmod(max_steps, n_blocks)``), so the
blocks together never take more than ``max_steps`` forward passes.

``sampler="remdm"`` is ReMDM (:mod:`xdllm_models.mdlm.remdm`): ancestral steps that may also
mask revealed tokens again, so that later steps can correct them; it runs every row through all
``max_steps`` steps over the whole output region (no blocks), with a forward pass at each step
that reveals a mask in the row (a step that only masks tokens again needs none).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor

from xdllm.diffusion.schedules import make_noise_schedule
from xdllm.predict import streams
from xdllm.predict.confidence import token_confidence
from xdllm.predict.engine import UnmaskingPredictor
from xdllm.predict.rows import RowState, StepOutcome, read_window, write_window
from xdllm_models.mdlm.remdm import RemaskingSchedule, remdm_step


class MDLMPredictor(UnmaskingPredictor):
    """The engine's options (see :class:`~xdllm.predict.engine.UnmaskingPredictor`) plus
    ``sampler``: ``"confidence"``, ``"ancestral"`` or ``"remdm"`` (see the module docstring).
    Ancestral sampling and ReMDM order positions by drawn times, so ``confidence``,
    ``threshold`` and ``entropy_budget`` must be left unset and ``remask`` false;
    ``noise_schedule`` defaults to ``log_linear`` and ``temperature`` to 1. ReMDM's own options
    (``remdm_schedule``, ``remdm_eta``, and the loop's ``remdm_t_on``, ``remdm_t_off``,
    ``remdm_alpha_on``; :class:`~xdllm_models.mdlm.remdm.RemaskingSchedule`) are refused with
    any other sampler.
    """

    def __init__(self, *args: Any, sampler: str = "confidence", remdm_schedule: str | None = None,
                 remdm_eta: float | None = None, remdm_t_on: float | None = None,
                 remdm_t_off: float | None = None, remdm_alpha_on: float | None = None,
                 **kwargs: Any) -> None:
        remdm_options = {"remdm_schedule": remdm_schedule, "remdm_eta": remdm_eta, "remdm_t_on": remdm_t_on,
                         "remdm_t_off": remdm_t_off, "remdm_alpha_on": remdm_alpha_on}
        remasking = checked_sampler(sampler, remdm_options, kwargs, type(self).__name__)
        super().__init__(*args, **kwargs)
        self.sampler = sampler
        self.remasking = remasking
        self._unmasked_shares = (remasking.unmasked_shares(self.max_steps, self.noise_schedule)
                                 if remasking is not None else [])
        for name, value in remdm_options.items():
            setattr(self, name, value)

    def reveal_steps(self, keys: Integer[Tensor, " rows"], width: int,
                     n_blocks: Integer[Tensor, " rows"] | None = None) -> Integer[Tensor, "rows width"]:
        """The step at which each output offset is revealed, counted inside its block: in
        ``[0, W)`` for a block of ``W`` steps (without ``block_size``: one block of ``max_steps``).
        ``n_blocks``: each row's number of blocks (None: those of ``width`` offsets), which sets
        its blocks' steps, so a row's reveal steps do not depend on the other rows' regions.

        A position still masked at time ``t`` stays masked at ``s < t`` with probability
        ``m(s) / m(t)``; with one uniform ``v`` per position it is masked at ``t_s`` while
        ``v < m(t_s) / m(1)``, so its reveal step is the number of steps ``s < W`` with
        ``m(1 - (s + 1) / W) / m(1) > v``.
        """
        draws = streams.uniforms(keys, 0, streams.Purpose.UNMASK_TIME, width).double()
        block_size = self.block_size or max(width, 1)
        if n_blocks is None:
            n_blocks = torch.full(keys.shape, -(-width // block_size), device=keys.device)
        per_block = self.max_steps // n_blocks.clamp(min=1)
        extra = self.max_steps % n_blocks.clamp(min=1)
        longer = torch.arange(width, device=keys.device)[None, :] // block_size < extra[:, None]
        return torch.where(longer, self._reveal_within(draws, per_block + 1), self._reveal_within(draws, per_block))

    def _reveal_within(self, draws: Float[Tensor, "rows width"], steps: Integer[Tensor, " rows"]
                       ) -> Integer[Tensor, "rows width"]:
        """Reveal steps in ``[0, steps[i])`` of row ``i``'s ancestral run of ``steps[i]`` steps.

        Each row's ``m(1 - (s + 1) / W) / m(1)`` for ``s = W-1 .. 0`` (ascending) is written at the
        end of a ``[rows, max W]`` table led by ``-inf``; one batched ``searchsorted`` counts the
        entries ``<= v``, and ``max W`` minus that count is the number ``> v``.
        """
        schedule = self.noise_schedule or make_noise_schedule("log_linear")
        longest = self.max_steps + 1
        steps = steps.clamp(min=1).double()[:, None]
        column = torch.arange(longest, dtype=torch.float64, device=draws.device)[None, :]
        later = longest - 1 - column  # the step s of each column, descending
        kept = schedule.mask_prob(1.0 - (later + 1) / steps) / schedule.mask_prob(
            torch.ones((), dtype=torch.float64, device=draws.device))
        ascending = torch.where(later < steps, kept, float("-inf")).contiguous()
        return longest - torch.searchsorted(ascending, draws.contiguous(), right=True)

    def _choose(self, logits: Float[Tensor, "rows region vocab"], keys: Tensor, step: int,
                n_blocks: Integer[Tensor, " rows"] | None = None) -> tuple[Tensor, Tensor, Tensor]:
        probs, tokens, scores = super()._choose(logits, keys, step, n_blocks)
        if self.sampler == "ancestral":
            scores = -self.reveal_steps(keys, logits.shape[1], n_blocks).to(scores.dtype)
        elif self.sampler == "remdm":
            scores = token_confidence("top_prob", probs, tokens)
        return probs, tokens, scores

    def _select(self, scores: Float[Tensor, "rows region"], candidates: Bool[Tensor, "rows region"],
                count: Integer[Tensor, " rows"], probs: Float[Tensor, "rows region vocab"]
                ) -> Bool[Tensor, "rows region"]:
        if self.sampler != "ancestral":
            return super()._select(scores, candidates, count, probs)
        ranked = torch.where(candidates, scores, float("-inf"))
        earliest = ranked.max(dim=1, keepdim=True).values
        return candidates & (ranked == earliest)

    def _model_free_step(self, state: RowState, unfinished: Bool[Tensor, " batch"], step: int
                         ) -> tuple[RowState, Bool[Tensor, " batch"], Bool[Tensor, " batch"]] | None:
        """ReMDM's step decides what it reveals and masks again before the model runs (the
        draws need no logits): a row that reveals nothing this step only masks tokens again and
        needs no forward pass. Those rows take their step here; the others run the model."""
        if self.remasking is None:
            return None
        mask_id = self._tokenizer().mask_token_id
        window = read_window(state.ids, state.window_index, None)
        # the tokens (and their probabilities) are placeholders: the rows this step changes here reveal none
        plan = remdm_step(self.remasking, self._unmasked_shares, step, window, window,
                          state.written_scores, state.written_scores, state.generated & state.window_valid,
                          state.keys, mask_id)
        runs = unfinished & plan.revealed.any(1)
        idle = unfinished & ~runs
        new_window = torch.where(idle[:, None], plan.window, window)
        masks_left = ((new_window == mask_id) & state.window_valid).any(1)
        ids = write_window(state.ids, state.window_index, state.window_valid, None, window, new_window)
        return (replace(state, ids=ids), torch.where(idle, masks_left | (step + 1 < self.max_steps), unfinished),
                runs)

    def _step(self, logits: Float[Tensor, "rows region vocab"], rows: RowState, step: int,
              shared_start: int | None) -> StepOutcome:
        if self.remasking is None:
            return super()._step(logits, rows, step, shared_start)
        mask_id = self._tokenizer().mask_token_id
        probs, tokens, token_probs = self._choose(logits, rows.keys, step, rows.n_blocks)
        window_ids = read_window(rows.ids, rows.window_index, shared_start)
        update = remdm_step(self.remasking, self._unmasked_shares, step, window_ids, tokens,
                            token_probs, rows.written_scores, rows.generated & rows.window_valid, rows.keys,
                            mask_id)
        masks_left = ((update.window == mask_id) & rows.window_valid).any(1)
        return StepOutcome(
            ids=write_window(rows.ids, rows.window_index, rows.window_valid, shared_start, window_ids, update.window),
            block=rows.block, block_entry=rows.block_entry,
            unfinished=masks_left | (step + 1 < self.max_steps),
            probs=probs, committed=update.revealed, scores=token_probs, written_scores=update.written_probs)


def checked_sampler(sampler: str, remdm_options: dict[str, Any], kwargs: dict[str, Any],
                    where: str) -> RemaskingSchedule | None:
    """Refuse the engine and ReMDM options that do not apply to ``sampler``, fill in its defaults
    (in ``kwargs``: ``temperature`` 1 and a log-linear ``noise_schedule``, unless ReMDM's loop
    sets the time profile) and return ReMDM's schedule (None for the other samplers). ``where``:
    the predictor's class name, for the messages."""
    if sampler not in ("confidence", "ancestral", "remdm"):
        raise ValueError(f"{where}: sampler must be 'confidence', 'ancestral' or 'remdm', got {sampler!r}")
    if sampler != "remdm":
        given = [name for name, value in remdm_options.items() if value is not None]
        if given:
            raise ValueError(f"{where}: {given[0]}={remdm_options[given[0]]!r} is an option of "
                             f"sampler='remdm'; the sampler is {sampler!r} (set it to null)")
    if sampler != "confidence":
        for option in ("confidence", "threshold", "entropy_budget"):
            if kwargs.get(option) is not None:
                raise ValueError(f"{where}: sampler={sampler!r} reveals positions at drawn "
                                 f"times; {option}={kwargs[option]!r} does not apply (set it to null)")
        if kwargs.get("remask"):
            raise ValueError(f"{where}: remask=true needs sampler='confidence'; "
                             + ("ReMDM masks tokens again itself" if sampler == "remdm"
                                else "the ancestral sampler never takes a revealed token back"))
        kwargs.setdefault("temperature", 1.0)
        if kwargs.get("noise_schedule") is None and remdm_options["remdm_schedule"] != "loop":
            kwargs["noise_schedule"] = "log_linear"
    if sampler != "remdm":
        return None
    for option, why in (("block_size", "steps the whole output region through time together, not block by block"),
                        ("stop_at_eos", "runs every row for all max_steps steps and may mask a token after an EOS "
                                        "again")):
        if kwargs.get(option):
            raise ValueError(f"{where}: sampler='remdm' {why}; {option}={kwargs[option]!r} does not apply")
    if remdm_options["remdm_schedule"] == "loop" and kwargs.get("noise_schedule") is not None:
        raise ValueError(f"{where}: remdm_schedule='loop' sets its own time profile (remdm_t_on, "
                         f"remdm_t_off, remdm_alpha_on); noise_schedule={kwargs['noise_schedule']!r} "
                         "does not apply (set it to null)")
    return RemaskingSchedule.from_options(
        remdm_options["remdm_schedule"], remdm_options["remdm_eta"], remdm_options["remdm_t_on"],
        remdm_options["remdm_t_off"], remdm_options["remdm_alpha_on"], where)
