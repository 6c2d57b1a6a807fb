"""``UDLMPredictor``: block-by-block uniform-noise denoising over a KV cache of the causal encoder.

The prompt (left- or right-padded ``[bos] + prompt`` rows, as :class:`~xdllm.collate.PromptCollator`
makes them) runs once through the encoder (:class:`~xdllm.nn.CausalMask`) into a
:class:`~xdllm.nn.KVCache`. The output region is ``max_new_tokens`` rounded up to whole blocks,
on positions shifted so that it starts on a block boundary (:mod:`~xdllm_models.hybrid.layout`).
Then, for each block:

1. the canvas starts as uniform random tokens over the whole vocabulary (the training noise at
   level 1), drawn from the sample's stream;
2. each step runs the canvas against the cached prefix (:class:`~xdllm.nn.BlockCausalMask`:
   the block sees itself and the clean blocks before it, as in training; the cache is only
   read) and re-predicts **every** position of the block: a token written at one step may be
   revised at the next. A row's block stops when a step leaves its tokens unchanged
   (``stop_when_unchanged``; the canvas is then a fixed point of the denoiser), when every
   position's entropy is under ``entropy_bound`` (nats), or after ``steps_per_block`` steps;
   the block's tokens are committed at that step;
3. the committed block runs through the encoder into the cache (causal, appended).

Each denoising step is handed to the history recorder (the top-k of every block position, the
canvas after the step, ``committed`` at the block's last step); which positions changed at a
step is the difference of consecutive canvases (:attr:`xdllm.history.SampleHistory.changed`).
Rows run their blocks in lockstep (the cache has one fill length): a row whose block stopped
waits, uncounted, for the others. ``steps_taken`` counts every forward pass a row used: the
prompt's, its denoising steps and the encoder pass of each block it went on after. With
``stop_at_eos`` a row finishes with the block holding its first EOS; positions after that EOS
are padding in ``ids``. Draws come from the per-sample streams keyed by ``(seed,
sample_index)``, the block and the step, so a sample's output does not depend on its batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn

from xdllm.interfaces import HistoryRecorder, PredictionDict, Tokenizer
from xdllm.nn import BlockCausalMask, CausalMask
from xdllm.predict import streams
from xdllm.predict.block_steps import block_step_state
from xdllm.predict.canvas import Canvas
from xdllm.predict.confidence import entropy
from xdllm.predict.inputs import check_decoding_options
from xdllm.predict.sampling import choose_tokens, final_distribution, never_generated_ids
from xdllm.predict.stopping import fill_after_eos
from xdllm_models.hybrid.decoding import block_decoding_positions, start_block_decoding


class UDLMPredictor:
    """Block-wise uniform-noise decoding with revisions; see the module docstring.

    Args:
        max_new_tokens: tokens generated per prompt at most, rounded up to whole blocks.
        block_size: tokens per block (as in training).
        tokenizer: pad / mask / bos / eos ids, the vocabulary size, and decoding.
        model: default model (a :class:`~xdllm_models.udlm.model.UDLMTransformer`);
            ``predict(model=...)`` overrides it.
        steps_per_block: denoising steps per block at most (None: ``block_size``).
        stop_when_unchanged: stop a block at the first step that changes none of its tokens.
        entropy_bound: stop a block once every position's entropy (nats) is below this
            (None: no entropy stop).
        temperature: 0 = argmax; > 0 samples from ``softmax(logits / temperature)``.
        top_k, top_p: restrict the distribution before choosing.
        stop_at_eos: a row stops with the block holding its first EOS (the rest is padding).
        skip_special_tokens: passed to ``tokenizer.decode`` for ``text``.
        seed: base of the per-sample random streams.
    """

    def __init__(self, max_new_tokens: int, block_size: int, tokenizer: Tokenizer | None = None,
                 model: nn.Module | None = None, steps_per_block: int | None = None,
                 stop_when_unchanged: bool = True, entropy_bound: float | None = None, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, stop_at_eos: bool = True,
                 skip_special_tokens: bool = True, seed: int = 0) -> None:
        where = type(self).__name__
        check_decoding_options(where, max_new_tokens=max_new_tokens, seed=seed, temperature=temperature,
                               top_k=top_k, top_p=top_p,
                               flags={"stop_when_unchanged": stop_when_unchanged, "stop_at_eos": stop_at_eos,
                                      "skip_special_tokens": skip_special_tokens})
        if block_size < 1:
            raise ValueError(f"{where}: block_size must be >= 1, got {block_size}")
        steps = block_size if steps_per_block is None else steps_per_block
        if steps < 1:
            raise ValueError(f"{where}: steps_per_block must be >= 1 (or null), got {steps_per_block}")
        if entropy_bound is not None and not entropy_bound > 0.0:
            raise ValueError(f"{where}: entropy_bound must be > 0 (nats) or null, got {entropy_bound}")
        self.max_new_tokens = max_new_tokens
        self.block_size = block_size
        self.tokenizer = tokenizer
        self.model = model
        self.steps_per_block = steps
        self.stop_when_unchanged = stop_when_unchanged
        self.entropy_bound = entropy_bound
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.stop_at_eos = stop_at_eos
        self.skip_special_tokens = skip_special_tokens
        self.seed = seed

    def initial_block(self, keys: Integer[Tensor, " batch"], block: int, vocab_size: int
                      ) -> Integer[Tensor, "batch block"]:
        """A block of uniform random tokens over ``[0, vocab_size)``, from each sample's stream."""
        draws = streams.uniforms(keys, block, streams.Purpose.NOISE_MASK, self.block_size)
        return (draws * vocab_size).long().clamp(max=vocab_size - 1)

    def _step_tokens(self, logits: Float[Tensor, "batch block vocab"], keys: Integer[Tensor, " batch"],
                     stream_step: int) -> tuple[Tensor, Tensor]:
        """The step's distribution (``never_generated_ids`` banned) and the token chosen at every position."""
        probs = final_distribution(logits, self.temperature, self.top_k, self.top_p,
                                   banned_ids=never_generated_ids(self.tokenizer))
        draws = None if self.temperature == 0.0 else streams.uniforms(keys, stream_step, streams.Purpose.TOKEN,
                                                                       self.block_size)
        return probs, choose_tokens(probs, draws)

    def _block_stops(self, old: Integer[Tensor, "batch block"], new: Integer[Tensor, "batch block"],
                     probs: Float[Tensor, "batch block vocab"], last_step: bool) -> Bool[Tensor, " batch"]:
        """Rows whose block is final after this step."""
        stops = torch.full(old.shape[:1], last_step, dtype=torch.bool, device=old.device)
        if self.stop_when_unchanged:
            stops = stops | (old == new).all(1)
        if self.entropy_bound is not None:
            stops = stops | (entropy(probs).amax(1) < self.entropy_bound)
        return stops

    def positions_needed(self, prompt_length: int) -> int:
        """See :func:`~xdllm_models.hybrid.decoding.block_decoding_positions`."""
        return block_decoding_positions(prompt_length, self.max_new_tokens, self.block_size)

    @torch.no_grad()
    def predict(self, batch: Mapping[str, Any], model: nn.Module | None = None,
                history: HistoryRecorder | None = None) -> PredictionDict:
        start = start_block_decoding("UDLMPredictor", batch, model, self.model, self.tokenizer,
                                     self.max_new_tokens, self.block_size, self.seed, history)
        model, tok, canvas, keys, cache, tally = (start.model, start.tokenizer, start.canvas, start.keys, start.cache,
                                                  start.tally)
        size = self.block_size
        n_rows, device = canvas.ids.shape[0], canvas.ids.device
        k = history.k if history is not None else 0
        encoder_passes = torch.ones(n_rows, dtype=torch.long, device=device)
        ids = canvas.ids
        finished = torch.zeros(n_rows, dtype=torch.bool, device=device)
        for block in range(start.n_blocks):
            columns, block_positions = start.block_columns(block)
            block_ids = self.initial_block(keys, block, tok.vocab_size)
            stopped = finished.clone()
            for step in range(self.steps_per_block):
                active = ~stopped
                if not bool(active.any()):  # the step's one host sync
                    break
                logits = model(block_ids, positions=block_positions, mask_rule=BlockCausalMask(size),
                               kv_cache=cache, write_cache=False)
                probs, tokens = self._step_tokens(logits, keys, block * self.steps_per_block + step)
                tokens = torch.where(active[:, None], tokens, block_ids)
                stops = active & self._block_stops(block_ids, tokens, probs, step + 1 == self.steps_per_block)
                block_ids = tokens
                ids = ids.scatter(1, columns, torch.where(finished[:, None], tok.mask_token_id, block_ids))
                if history is not None:
                    scores = probs.gather(-1, block_ids[..., None])[..., 0]
                    history.on_step(block_step_state(tally.steps, ids, canvas, block * size, probs,
                                                stops[:, None].expand(-1, size), scores, active, k))
                tally.count(active)
                stopped = stopped | stops
            if self.stop_at_eos:
                finished = finished | (block_ids == tok.eos_token_id).any(1)
            if block + 1 == start.n_blocks or bool(finished.all()):
                break
            model(block_ids, positions=block_positions, mask_rule=CausalMask(), kv_cache=cache)  # append
            encoder_passes = encoder_passes + (~finished).long()

        ids = self._settle(ids, canvas)
        return start.finish(ids, tally.steps_taken + encoder_passes, self.skip_special_tokens, history)

    def _settle(self, ids: Integer[Tensor, "batch seq_len"], canvas: Canvas) -> Integer[Tensor, "batch seq_len"]:
        """Blocks never generated become padding, and with ``stop_at_eos`` so does everything after
        a row's first EOS."""
        tok = self.tokenizer
        window = ids.gather(1, canvas.window_index)
        window = torch.where(window == tok.mask_token_id, tok.pad_token_id, window)
        if self.stop_at_eos:
            window = fill_after_eos(window, canvas.window_valid, tok.eos_token_id, tok.mask_token_id,
                                    tok.pad_token_id)[0]
        return ids.scatter(1, canvas.window_index, torch.where(canvas.window_valid, window,
                                                               ids.gather(1, canvas.window_index)))
