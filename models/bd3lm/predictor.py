"""``BD3LMPredictor``: semi-autoregressive block diffusion, block by block over an exact KV cache.

The output region (``max_new_tokens`` slots after each prompt) is cut into blocks of
``block_size``; blocks are generated left to right, and each block is denoised in at most
``steps_per_block`` forward passes by the shared engine's parts: the final distribution
(temperature, top-k, top-p), the confidence of the token that would be written (``top_prob``,
``prob_diff``, ``entropy``, or random order), the scheduled count per step (even split or a
noise schedule) and the threshold (:class:`~xdllm.predict.UnmaskingPredictor`'s ``_choose``
and ``_select``; ``docs/predictor.md``).

Positions are block-aligned as in training (:mod:`~xdllm_models.bd3lm.layout`): a prompt of
``n`` tokens starts at position ``(-n) mod block_size``, so every generated block is a whole
block whatever the prompt length or padding. A block's forward pass sees only itself and the
clean blocks before it (:class:`~xdllm.nn.BlockCausalMask`), which never change once written:
with ``use_cache`` (default) the prompt and each finished block are encoded once into a
:class:`~xdllm.nn.KVCache` and a step costs a pass over ``block_size`` tokens
(:mod:`~xdllm_models.bd3lm.prefix`); ``use_cache=false`` recomputes the whole prefix at every
step and gives the same tokens.

With ``stop_at_eos`` a row finishes with the block in which its first EOS is settled (the rest
of its region is padding) and is dropped from the cache; generation ends when every row is
finished or the region is full. A history recorder sees every step of every block: the top-k
of the current block's offsets, zeros elsewhere. Random draws come from the per-sample streams
keyed by the block and the step inside it, so a sample's output does not depend on its batch.
``steps_taken`` counts the forward passes that denoised the row (the pass that appends a
finished block is the next block's first step, so no pass goes uncounted).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn

from xdllm.diffusion.schedules import NoiseSchedule
from xdllm.interfaces import DenoisingStep, HistoryRecorder, PredictionDict
from xdllm.predict import streams
from xdllm.predict.blocks import whole_blocks
from xdllm.predict.canvas import continuation_canvas
from xdllm.predict.engine import UnmaskingPredictor
from xdllm.predict.inputs import predictor_inputs, sample_indices
from xdllm.predict.remasking import remask_lowest
from xdllm.predict.stopping import fill_after_eos
from xdllm.predict.text import decode_regions
from xdllm.predict.unmask_count import scheduled_count
from xdllm_models.bd3lm.prefix import BlockRows, CachedPrefix, RecomputedPrefix


class BD3LMPredictor(UnmaskingPredictor):
    """Block-by-block generation; see the module docstring.

    Args:
        max_new_tokens: slots generated after each prompt at most.
        block_size: tokens per block (the training block size, normally).
        steps_per_block: forward passes per block at most (None: ``block_size``, one token a step).
        use_cache: keep the clean prefix in a KV cache (False: recompute it every step).
        stop_at_eos: a row stops once its first EOS is settled.
        tokenizer, model, noise_schedule, top_k, top_p, confidence, threshold, temperature,
        skip_special_tokens, remask, entropy_budget, seed: as for :class:`~xdllm.predict.UnmaskingPredictor`, applied
        inside each block.
    """

    def __init__(self, max_new_tokens: int, block_size: int, steps_per_block: int | None = None,
                 use_cache: bool = True, stop_at_eos: bool = True, tokenizer: Any = None,
                 model: nn.Module | None = None, noise_schedule: str | NoiseSchedule | None = None,
                 top_k: int | None = None, top_p: float | None = None, confidence: str | None = "top_prob",
                 threshold: float | None = None, temperature: float = 0.0, skip_special_tokens: bool = True,
                 remask: bool = False, entropy_budget: float | None = None, seed: int = 0) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"BD3LMPredictor: max_new_tokens must be >= 1, got {max_new_tokens}")
        if block_size < 1:
            raise ValueError(f"BD3LMPredictor: block_size must be >= 1, got {block_size}")
        steps_per_block = block_size if steps_per_block is None else steps_per_block
        if steps_per_block < 1:
            raise ValueError(f"BD3LMPredictor: steps_per_block must be >= 1 or null, got {steps_per_block}")
        for name, value in (("use_cache", use_cache), ("stop_at_eos", stop_at_eos)):
            if not isinstance(value, bool):
                raise ValueError(f"BD3LMPredictor: {name} must be true or false, got {value!r}")
        super().__init__(max_steps=steps_per_block, max_new_tokens=max_new_tokens, tokenizer=tokenizer,
                         model=model, noise_schedule=noise_schedule, top_k=top_k, top_p=top_p,
                         confidence=confidence, threshold=threshold, skip_special_tokens=skip_special_tokens,
                         temperature=temperature, block_size=block_size, stop_at_eos=stop_at_eos, remask=remask,
                         entropy_budget=entropy_budget, seed=seed)
        self.steps_per_block = steps_per_block
        self.use_cache = use_cache

    def _positions_fit(self, model: nn.Module, last_position: int) -> None:
        limit = getattr(getattr(model, "config", None), "max_positions", None)
        if isinstance(limit, int) and last_position >= limit:
            raise ValueError(f"BD3LMPredictor: block-aligned prompts plus max_new_tokens={self.max_new_tokens} "
                             f"reach position {last_position}, beyond model.max_positions={limit}; lower "
                             "predictor.max_new_tokens")

    def positions_needed(self, prompt_length: int) -> int:
        """Positions a generation from ``prompt_length`` tokens (bos included) uses: the prompt
        ends on a block boundary (the answer starts one), then ``max_new_tokens``."""
        return whole_blocks(prompt_length, self.block_size) + self.max_new_tokens

    @torch.no_grad()
    def predict(self, batch: Mapping[str, Any], model: nn.Module | None = None,
                history: HistoryRecorder | None = None) -> PredictionDict:
        start_time = time.perf_counter()
        model, tok = predictor_inputs("BD3LMPredictor", batch, model, self.model, self.tokenizer)
        if batch.get("infill", False):
            raise ValueError("BD3LMPredictor generates continuations block by block; it does not infill")
        device = next(model.parameters()).device
        prompt_ids = batch["input_ids"].to(device)
        prompt_real = batch["attention_mask"].to(device).bool()
        block_size, new_tokens = self.block_size, self.max_new_tokens
        canvas = continuation_canvas(prompt_ids, prompt_real, new_tokens, tok.pad_token_id, tok.mask_token_id)
        n_rows, prompt_len = prompt_ids.shape
        offset = -prompt_real.sum(1) % block_size
        positions = canvas.positions + offset[:, None]  # block-aligned: every response starts a block
        self._positions_fit(model, int((offset + prompt_real.sum(1)).max()) + new_tokens - 1)
        keys = streams.row_keys(self.seed, sample_indices("BD3LMPredictor", batch, n_rows, device))
        prefix = (CachedPrefix(model, block_size, prompt_ids, prompt_real, positions[:, :prompt_len], new_tokens)
                  if self.use_cache else RecomputedPrefix(model, block_size))
        k = history.k if history is not None else 0
        if history is not None:
            history.begin(batch, canvas.ids, canvas.output_start)

        last_start = int(canvas.output_start.max())  # read once: the canvas a block needs ends on the host
        ids = canvas.ids
        alive = torch.arange(n_rows, device=device)
        steps_taken = torch.zeros(n_rows, dtype=torch.long, device=device)
        last_step = torch.zeros(n_rows, dtype=torch.long, device=device)
        elapsed: list[float] = []
        for block in range(math.ceil(new_tokens / block_size)):
            low, high = block * block_size, min((block + 1) * block_size, new_tokens)
            columns = canvas.window_index[alive, low:high]
            block_ids = ids[alive].gather(1, columns)
            block_positions = positions[alive].gather(1, columns)
            end = last_start + high  # past every row's block: later columns are hidden from it
            unfinished = torch.ones(alive.shape, dtype=torch.bool, device=device)
            written_scores = torch.zeros(block_ids.shape, device=device)  # for remasking
            for step in range(self.steps_per_block):
                taking_part = unfinished.nonzero().flatten()  # the step's one host sync
                if taking_part.numel() == 0:
                    break
                every_row = taking_part.numel() == alive.numel()
                rows = alive[taking_part]
                view = BlockRows(block_ids=block_ids[taking_part], block_positions=block_positions[taking_part],
                                 block_columns=columns[taking_part], canvas_ids=ids[rows, :end],
                                 canvas_real=canvas.attention_mask[rows, :end], canvas_positions=positions[rows, :end])
                logits = prefix.block_logits(None if every_row else taking_part, view)
                probs, tokens, scores = self._choose(logits, keys[rows], block * self.steps_per_block + step)
                old = view.block_ids
                masked = old == tok.mask_token_id
                count = self._count(masked, step)
                committed = self._select(scores, masked, count, probs)
                if self.remask:
                    remasked = remask_lowest(old, tokens, scores, written_scores[taking_part], masked, committed,
                                             torch.ones_like(masked), tok.mask_token_id)
                    new, committed = remasked.window, remasked.committed
                    written_scores = written_scores.index_copy(0, taking_part, remasked.written_scores)
                else:
                    new = torch.where(committed, tokens, old)
                if self.stop_at_eos:
                    new, padded = fill_after_eos(new, torch.ones_like(masked), tok.eos_token_id,
                                                 tok.mask_token_id, tok.pad_token_id)
                    committed = committed | (padded & masked)
                block_ids = block_ids.index_copy(0, taking_part, new)
                ids = ids.index_copy(0, rows, ids[rows].scatter(1, view.block_columns, new))
                unfinished = unfinished.index_copy(0, taking_part, (new == tok.mask_token_id).any(1))
                steps_taken = steps_taken.index_add(0, rows, torch.ones_like(rows))
                last_step = last_step.index_fill(0, rows, len(elapsed))
                elapsed.append(time.perf_counter() - start_time)
                if history is not None:
                    history.on_step(_step_state(len(elapsed) - 1, ids, canvas.output_start, canvas.window_valid,
                                                rows, low, probs, committed, scores, k))
            if self.stop_at_eos:  # the rows that go on: the block's one host sync
                kept = (block_ids != tok.eos_token_id).all(1).nonzero().flatten()
            else:
                kept = torch.arange(alive.numel(), device=device)
            prefix.finish_block(block_ids, block_positions, kept)
            alive = alive.index_select(0, kept)
            if alive.numel() == 0:
                break

        in_region = canvas.window_valid.new_zeros(ids.shape).scatter(1, canvas.window_index, canvas.window_valid)
        ids = torch.where(in_region & (ids == tok.mask_token_id), tok.pad_token_id, ids)  # after a stop
        prediction: PredictionDict = {
            "loss": None,
            "text": decode_regions(tok, ids, canvas.output_start, canvas.region_len, self.skip_special_tokens),
            "ids": ids,
            "time_taken": [elapsed[s] for s in last_step.tolist()],
            "output_start_idx": canvas.output_start,
            "steps_taken": steps_taken.tolist(),
        }
        if history is not None:
            history.end(prediction)
        return prediction

    def _count(self, masked: Bool[Tensor, "rows width"], step: int) -> Integer[Tensor, " rows"]:
        steps = self.steps_per_block
        window = torch.full(masked.shape[:1], steps, dtype=torch.long, device=masked.device)
        return scheduled_count(masked.sum(1), window - step, window, self.noise_schedule)


def _step_state(step: int, ids: Integer[Tensor, "batch seq_len"], output_start: Integer[Tensor, " batch"],
                window_valid: Bool[Tensor, "batch region"], rows: Integer[Tensor, " rows"], low: int,
                probs: Float[Tensor, "rows width vocab"], committed: Bool[Tensor, "rows width"],
                scores: Float[Tensor, "rows width"], k: int) -> DenoisingStep:
    """What a history recorder keeps of one step: the top-k, commits and confidence of the
    current block's offsets for the rows that ran; zeros (False) everywhere else."""
    vocab = probs.shape[-1]
    if not 1 <= k <= vocab:
        raise ValueError(f"history recorder asks for the top k={k} tokens per position; "
                         f"k must be in 1..{vocab} (the vocabulary size)")
    top = probs.topk(k, dim=-1)
    n_rows, region = window_valid.shape
    width = probs.shape[1]

    def spread(values: Tensor) -> Tensor:
        out = values.new_zeros((n_rows, region, *values.shape[2:]))
        out[rows, low:low + width] = values
        return out

    active = torch.zeros(n_rows, dtype=torch.bool, device=ids.device).index_fill(0, rows, True)
    return DenoisingStep(step=step, canvas=ids, output_start=output_start, window_valid=window_valid,
                         topk_ids=spread(top.indices), topk_probs=spread(top.values), committed=spread(committed),
                         confidence=spread(scores), active=active)
