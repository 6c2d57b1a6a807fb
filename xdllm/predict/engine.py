"""The iterative unmasking engine shared by every masked-diffusion model family.

One step is one forward pass over the canvas of the rows that still have masks; it scores every
masked position of the current block with the confidence of the token it would commit, and
commits the best ``count`` of them (see ``unmask_count``), plus everything above ``threshold``.
Rows finish independently and finished rows are not sent through the model again. The loop
makes one host synchronisation per step: finding which rows are still unfinished (a family's
sampler may also change some rows without the model, ``_model_free_step``: then those that
need it).

Randomness (sampled tokens, random order) comes from counter-based streams keyed by
``(seed, sample_index, step, offset in the output region)``, so a sample's result does not depend
on the batch it is in, its row, or the padding layout.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn

from xdllm.config.signatures import argument_chain, named_arguments
from xdllm.diffusion.schedules import NoiseSchedule, make_noise_schedule
from xdllm.interfaces import HistoryRecorder, PredictionDict, Tokenizer
from xdllm.predict import blocks, streams
from xdllm.predict.canvas import Canvas, continuation_canvas, infill_canvas
from xdllm.predict.confidence import check_confidence_options, token_confidence
from xdllm.predict.guidance import check_guidance, condition_columns, guided_logits, null_prompt
from xdllm.predict.inputs import check_prompt_batch, sample_indices
from xdllm.predict.prefix_cache import PrefixCache, check_prefix_cache_model
from xdllm.predict.remasking import remask_lowest
from xdllm.predict.rows import RowState, StepOutcome, read_window, window_logits, write_window
from xdllm.predict.sampling import check_sampling_options, choose_tokens, final_distribution, never_generated_ids
from xdllm.predict.step_record import step_state
from xdllm.predict.stopping import fill_after_eos
from xdllm.predict.text import decode_regions
from xdllm.predict.unmask_count import check_entropy_budget, scheduled_count, select_positions


class UnmaskingPredictor(nn.Module):
    """Confidence-ordered iterative unmasking (continuation, unconditional, infilling).

    Arguments (semantics in ``docs/predictor.md``):
        max_steps: forward passes per row at most; every mask is filled by then.
        max_new_tokens: masks appended after each prompt (continuation); None or 0 for infilling.
        tokenizer: supplies pad / mask / bos / eos ids and decodes the text.
        model: default model; ``predict(model=...)`` overrides it. Not registered as a
            submodule (the predictor does not own the weights).
        noise_schedule: name or ``NoiseSchedule`` setting the per-step count; None = even split.
        top_k, top_p: restrict the distribution before choosing and scoring.
        confidence: ``top_prob``, ``prob_diff``, ``entropy`` or None (random order).
        threshold: also commit every candidate whose confidence is ``>= threshold``.
        entropy_budget: also commit, in confidence order, the candidates whose entropies sum
            (less the largest) to at most this many nats (EB-sampler; :mod:`xdllm.predict.unmask_count`).
        skip_special_tokens: passed to ``tokenizer.decode`` for ``text``.
        temperature: 0 = argmax; > 0 samples from ``softmax(logits / temperature)``.
        block_size: decode the output region in blocks of this many positions, left to right.
        stop_at_eos: pad everything after a settled first EOS and let the row finish early.
        remask: a step may mask again the block's earlier tokens that score below its new
            candidates (Mask-Predict, :mod:`xdllm.predict.remasking`).
        prefix_cache: keep the keys and values of the prompt and the finished blocks from a
            full forward and run only the columns after them until the next refresh (an
            approximation, :mod:`xdllm.predict.prefix_cache`).
        prefix_cache_refresh: with ``prefix_cache``, also refresh the kept prefix every this many
            steps (None: only when the earliest block moves on or a row joins the running ones).
        dual_cache: with ``prefix_cache`` and ``block_size``, also keep the columns after the
            current block: a step between refreshes runs the current block only.
        guidance: classifier-free guidance scale w (0: none): each step also runs the model
            with a null prompt and uses ``uncond + (1 + w)(cond - uncond)``
            (:mod:`xdllm.predict.guidance`; for models trained with ``prompt_dropout``).
        seed: base of the per-sample random streams.
    """

    def __init__(self, max_steps: int, max_new_tokens: int | None = None,
                 tokenizer: Tokenizer | None = None, model: nn.Module | None = None,
                 noise_schedule: str | NoiseSchedule | None = None, top_k: int | None = None,
                 top_p: float | None = None, confidence: str | None = None,
                 threshold: float | None = None, skip_special_tokens: bool = True,
                 temperature: float = 0.0, block_size: int | None = None,
                 stop_at_eos: bool = False, remask: bool = False, prefix_cache: bool = False,
                 prefix_cache_refresh: int | None = None, dual_cache: bool = False,
                 guidance: float = 0.0, entropy_budget: float | None = None, seed: int = 0) -> None:
        super().__init__()
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if max_new_tokens is not None and max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0 or None, got {max_new_tokens}")
        if block_size is not None and block_size < 1:
            raise ValueError(f"block_size must be >= 1 or None, got {block_size}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        for name, value in (("remask", remask), ("prefix_cache", prefix_cache), ("dual_cache", dual_cache)):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be true or false, got {value!r}")
        if prefix_cache_refresh is not None and not (prefix_cache and prefix_cache_refresh >= 1):
            raise ValueError(f"prefix_cache_refresh must be >= 1 and needs prefix_cache=true, got "
                             f"prefix_cache_refresh={prefix_cache_refresh} with prefix_cache={prefix_cache}")
        if dual_cache and not (prefix_cache and block_size is not None):
            raise ValueError(f"dual_cache keeps the columns after the current block: it needs prefix_cache=true "
                             f"and a block_size, got prefix_cache={prefix_cache}, block_size={block_size}")
        check_guidance(guidance)
        if guidance and prefix_cache:
            raise ValueError("guidance runs a second, unconditional canvas whose prompt differs: "
                             "it cannot share the conditional one's prefix_cache; use one or the other")
        check_sampling_options(temperature, top_k, top_p)
        check_confidence_options(confidence, threshold)
        check_entropy_budget(entropy_budget)
        self.max_steps = max_steps
        self.max_new_tokens = max_new_tokens
        self.tokenizer = tokenizer
        object.__setattr__(self, "model", model)
        self.noise_schedule = (None if noise_schedule is None
                               else make_noise_schedule(noise_schedule))
        self.top_k = top_k
        self.top_p = top_p
        self.confidence = confidence
        self.threshold = threshold
        self.skip_special_tokens = skip_special_tokens
        self.temperature = temperature
        self.block_size = block_size
        self.stop_at_eos = stop_at_eos
        self.remask = remask
        self.prefix_cache = prefix_cache
        self.prefix_cache_refresh = prefix_cache_refresh
        self.dual_cache = dual_cache
        self.guidance = guidance
        self.entropy_budget = entropy_budget
        self.seed = seed

    def extra_repr(self) -> str:
        """The constructor's options as the predictor holds them, ``MLMPredictor(max_steps=9, ...,
        threshold=0.9)`` (an ``nn.Module`` without submodules printed as ``MLMPredictor()``
        otherwise). A subclass's own ``__init__`` names them; one that passes ``**kwargs`` on
        adds its base's."""
        names = [name for name in named_arguments(argument_chain(type(self))[0]) if name not in ("tokenizer", "model")]
        return ", ".join(f"{name}={getattr(self, name)!r}" for name in names if hasattr(self, name))

    # ------------------------------------------------------------------ setup

    def _tokenizer(self) -> Tokenizer:
        if self.tokenizer is None:
            raise ValueError("UnmaskingPredictor needs a tokenizer (for the mask, pad and eos "
                             "ids); pass tokenizer=...")
        return self.tokenizer

    def build_canvas(self, batch: Mapping[str, Any], device: torch.device) -> Canvas:
        """Continuation canvas, or infilling when asked for or implied by the batch."""
        tok = self._tokenizer()
        check_prompt_batch(type(self).__name__, batch)
        input_ids = batch["input_ids"].to(device)
        attention_mask = batch["attention_mask"].to(device)
        infill = bool(batch.get("infill", False)) or (
            not self.max_new_tokens
            and bool(((input_ids == tok.mask_token_id) & attention_mask.bool()).any()))
        if infill:
            return infill_canvas(input_ids, attention_mask, tok.pad_token_id, tok.mask_token_id)
        if not self.max_new_tokens:
            raise ValueError("nothing to generate: max_new_tokens is "
                             f"{self.max_new_tokens!r} and the batch holds no mask tokens")
        return continuation_canvas(input_ids, attention_mask, self.max_new_tokens,
                                   tok.pad_token_id, tok.mask_token_id)

    def _prefix_cache(self, model: nn.Module, shared_start: int | None) -> PrefixCache | None:
        """The ``prefix_cache`` of one ``predict`` call, or None without the option."""
        if not self.prefix_cache:
            return None
        if shared_start is None:
            raise ValueError("prefix_cache=true needs every row's output to start at the same canvas "
                             "column (a continuation of left-padded prompts); this batch's outputs start "
                             "at different columns (infilling, or right-padded prompts)")
        check_prefix_cache_model(model)
        return PrefixCache(shared_start, self.block_size, self._tokenizer().mask_token_id,
                           self.prefix_cache_refresh, self.dual_cache)

    # ------------------------------------------------------------------ one step

    def _window_logits(self, model: nn.Module, rows: RowState, shared_start: int | None
                       ) -> Float[Tensor, "rows region vocab"]:
        """The rows' window logits; with ``guidance``, from the conditional and the
        unconditional canvas, run as one batch of twice the rows."""
        if not self.guidance:
            return window_logits(model, rows, shared_start)
        condition = condition_columns(rows.attention_mask, rows.window_index, rows.generated)
        null = null_prompt(rows.ids, condition, self._tokenizer().pad_token_id)
        both = replace(rows, ids=torch.cat([rows.ids, null]),
                       **{name: getattr(rows, name).repeat(2, 1)
                          for name in ("attention_mask", "positions", "window_index")})
        conditional, unconditional = window_logits(model, both, shared_start).chunk(2)
        return guided_logits(conditional, unconditional, self.guidance)

    def _choose(self, logits: Float[Tensor, "rows region vocab"], keys: Tensor, step: int,
                n_blocks: Integer[Tensor, " rows"] | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Final distribution, chosen tokens and their confidence on the output window.

        ``n_blocks`` (each row's number of blocks) is for a family's sampler that orders by
        block (MDLM's ancestral one); the confidence modes do not need it."""
        tok = self._tokenizer()
        probs = final_distribution(logits, self.temperature, self.top_k, self.top_p,
                                   banned_ids=never_generated_ids(tok))
        width = logits.shape[1]
        draws = (streams.uniforms(keys, step, streams.Purpose.TOKEN, width)
                 if self.temperature > 0.0 else None)
        tokens = choose_tokens(probs, draws)
        if self.confidence is None:
            scores = streams.uniforms(keys, step, streams.Purpose.ORDER, width)
        else:
            scores = token_confidence(self.confidence, probs, tokens)
        return probs, tokens, scores

    def _select(self, scores: Float[Tensor, "rows region"], candidates: Bool[Tensor, "rows region"],
                count: Integer[Tensor, " rows"], probs: Float[Tensor, "rows region vocab"]
                ) -> Bool[Tensor, "rows region"]:
        """Which candidates this step commits: the ``count`` best-scoring ones, plus every one
        above the threshold and the best ones within the entropy budget (``probs``: the final
        distributions; a family's sampler may decide otherwise)."""
        return select_positions(scores, candidates, count, self.threshold, probs, self.entropy_budget)

    def _step(self, logits: Float[Tensor, "rows region vocab"], rows: RowState, step: int,
              shared_start: int | None) -> StepOutcome:
        """What one forward pass (its window logits) commits for the given rows."""
        tok = self._tokenizer()
        probs, tokens, scores = self._choose(logits, rows.keys, step, rows.n_blocks)

        window_ids = read_window(rows.ids, rows.window_index, shared_start)
        masked = (window_ids == tok.mask_token_id) & rows.window_valid
        block, in_block = blocks.current_block(masked, self.block_size)
        candidates = masked & in_block
        entry = torch.where(block != rows.block, step, rows.block_entry)
        deadline = blocks.block_deadline(block, rows.n_blocks, self.max_steps)
        count = scheduled_count(candidates.sum(1), deadline - step, deadline - entry,
                                self.noise_schedule)
        committed = self._select(scores, candidates, count, probs)
        if self.remask:
            remasked = remask_lowest(window_ids, tokens, scores, rows.written_scores, candidates,
                                     committed, rows.generated & in_block, tok.mask_token_id)
            new_window, committed, written_scores = remasked.window, remasked.committed, remasked.written_scores
        else:
            new_window, written_scores = torch.where(committed, tokens, window_ids), rows.written_scores
        if self.stop_at_eos:
            new_window, padded = fill_after_eos(new_window, rows.window_valid, tok.eos_token_id,
                                                tok.mask_token_id, tok.pad_token_id, writable=rows.generated)
            committed = committed | (padded & masked)  # a token padded away was committed before
        return StepOutcome(
            ids=write_window(rows.ids, rows.window_index, rows.window_valid, shared_start,
                              window_ids, new_window),
            block=block, block_entry=entry,
            unfinished=((new_window == tok.mask_token_id) & rows.window_valid).any(1),
            probs=probs, committed=committed, scores=scores, written_scores=written_scores)

    def _model_free_step(self, state: RowState, unfinished: Bool[Tensor, " batch"], step: int
                         ) -> tuple[RowState, Bool[Tensor, " batch"], Bool[Tensor, " batch"]] | None:
        """For a sampler whose step can change some rows without the model: the state after
        those rows' step, the rows still unfinished, and the rows the step must run the model
        for. None (every sampler here but MDLM's ReMDM): every unfinished row runs the model,
        and the loop ends when none is left."""
        return None

    # ------------------------------------------------------------------ the loop

    @torch.no_grad()
    def predict(self, batch: Mapping[str, Any], model: nn.Module | None = None,
                history: HistoryRecorder | None = None) -> PredictionDict:
        """Fill the masks of every row; see the class docstring for the options."""
        start_time = time.perf_counter()
        model = model if model is not None else self.model
        if model is None:
            raise ValueError("no model: pass model= to the predictor or to predict()")
        tok = self._tokenizer()
        param = next(model.parameters(), None) if isinstance(model, nn.Module) else None
        device = param.device if param is not None else batch["input_ids"].device
        canvas = self.build_canvas(batch, device)
        n_rows = canvas.ids.shape[0]
        n_blocks = blocks.count_blocks(canvas.region_len, self.block_size)
        blocks.check_step_budget(n_blocks, self.max_steps)
        shared_start = canvas.window_start
        generated = (canvas.ids.gather(1, canvas.window_index) == tok.mask_token_id) & canvas.window_valid
        state = RowState(
            ids=canvas.ids, attention_mask=canvas.attention_mask,
            positions=canvas.positions, window_index=canvas.window_index,
            window_valid=canvas.window_valid, generated=generated,
            keys=streams.row_keys(self.seed, sample_indices(type(self).__name__, batch, n_rows, device)),
            n_blocks=n_blocks, block=torch.full((n_rows,), -1, dtype=torch.long, device=device),
            block_entry=torch.zeros(n_rows, dtype=torch.long, device=device),
            written_scores=torch.zeros(generated.shape, device=device))
        unfinished = generated.any(1)
        steps_taken = torch.zeros(n_rows, dtype=torch.long, device=device)
        finished_at = torch.zeros(n_rows, dtype=torch.long, device=device)  # the loop step a row finished at
        kept_keys = self._prefix_cache(model, shared_start)
        if history is not None:
            history_k = history.k
            history.begin(batch, state.ids, canvas.output_start)
        elapsed: list[float] = []
        for step in range(self.max_steps + 1):
            finished_at = torch.where(unfinished, step + 1, finished_at)
            runs = unfinished
            model_free = self._model_free_step(state, unfinished, step) if step < self.max_steps else None
            if model_free is not None:
                state, unfinished, runs = model_free
            if kept_keys is None:
                active = runs.nonzero().flatten()  # the step's one host sync
            else:
                active, span = kept_keys.poll(runs, state.ids)  # the same, one sync
            elapsed.append(time.perf_counter() - start_time)
            if active.numel() == 0:
                if model_free is not None:
                    continue
                break
            if step == self.max_steps:
                raise RuntimeError(f"internal error: {active.numel()} rows still masked after "
                                   f"max_steps={self.max_steps}")
            every_row = active.numel() == n_rows
            rows = state if every_row else state.select(active)
            logits = (self._window_logits(model, rows, shared_start) if kept_keys is None else
                      kept_keys.window_logits(model, rows.ids, rows.attention_mask, rows.positions, span, active))
            outcome = self._step(logits, rows, step, shared_start)
            if every_row:
                state = state.updated(outcome)
                unfinished = outcome.unfinished
                steps_taken += 1
            else:
                state = state.updated_rows(active, outcome)
                unfinished = unfinished.index_copy(0, active, outcome.unfinished)
                steps_taken = steps_taken.index_add(0, active, torch.ones_like(active))
            if history is not None:
                history.on_step(step_state(step, state, active, outcome, canvas.output_start,
                                            history_k))

        steps, finished = torch.stack([steps_taken, finished_at]).tolist()
        prediction: PredictionDict = {
            "loss": None,
            "text": decode_regions(tok, state.ids, canvas.output_start, canvas.region_len,
                                   self.skip_special_tokens),
            "ids": state.ids,
            "time_taken": [elapsed[s] for s in finished],
            "output_start_idx": canvas.output_start,
            "steps_taken": steps,
        }
        if history is not None:
            history.end(prediction)
        return prediction
