"""``HybridPredictor``: causal prefill into a KV cache, then one block at a time, seed + diffusion fill.

The prompt (left- or right-padded ``[bos] + prompt`` rows, as :class:`~xdllm.collate.PromptCollator`
makes them) runs once through the network under :class:`~xdllm.nn.CausalMask`, filling a
:class:`~xdllm.nn.KVCache`. The output region is ``max_new_tokens`` rounded up to whole blocks
(the blocks the model was trained on), on positions shifted so that it starts on a block
boundary (:mod:`~xdllm_models.hybrid.layout`). Then, for each block:

1. **seed**: the block's first token comes from the causal branch's last logit (the prompt's
   pass for the first block, the previous block's append pass after that);
2. **fill**: the rest of the block is denoised by the diffusion branch: the block's tokens
   attend to the cached prefix and to each other (:class:`~xdllm.nn.BlockCausalMask`, the
   cache only read), and each pass commits every masked position whose confidence reaches
   ``threshold``, at least the scheduled count (``ceil(masks left / passes left)`` of
   ``steps_per_block`` passes) and, with ``entropy_budget``, at least the best-ranked
   candidates whose entropies fit that budget (the EB-sampler), from the shared engine's parts
   (:mod:`xdllm.predict.sampling`, :mod:`~xdllm.predict.confidence`,
   :mod:`~xdllm.predict.unmask_count`);
3. **append**: the finished block runs causally into the cache; its last logit seeds the next
   block.

Every forward pass is one step: each step commits tokens and is handed to the history recorder
(the seed's top-k at the block's first offset, or the fill's top-k over the block), and
``steps_taken`` counts a row's passes while it is unfinished. With ``stop_at_eos`` everything
after a settled EOS is padding, a row is finished once its block holds an EOS, and decoding
ends when every row is (one host synchronisation per step). Rows run their blocks in lockstep
(the cache has one fill length): a row whose block is full waits, uncounted, for the others.
Draws come from the per-sample streams keyed by ``(seed, sample_index)``, the block and the pass
within it, so a sample's output does not depend on its batch.
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
from xdllm.predict.confidence import check_confidence_options, token_confidence
from xdllm.predict.inputs import (
    check_decoding_options,
    require_tokenizer,
)
from xdllm.predict.remasking import remask_lowest
from xdllm.predict.sampling import choose_tokens, final_distribution, never_generated_ids
from xdllm.predict.stopping import fill_after_eos
from xdllm.predict.unmask_count import check_entropy_budget, scheduled_count, select_positions
from xdllm_models.hybrid.decoding import block_decoding_positions, start_block_decoding


class HybridPredictor:
    """Block-wise hybrid decoding with a KV cache; see the module docstring.

    Args:
        max_new_tokens: tokens generated per prompt at most, rounded up to whole blocks.
        block_size: tokens per block (as in training); 1 is plain autoregressive decoding.
        tokenizer: pad / mask / bos / eos ids, and decoding.
        model: default model (a :class:`~xdllm_models.hybrid.model.HybridRotaryTransformer`);
            ``predict(model=...)`` overrides it.
        confidence: score of a fill candidate: ``top_prob``, ``prob_diff``, ``entropy``, or None
            (random order).
        threshold: commit every candidate scoring ``>= threshold`` (None: only the scheduled count).
        steps_per_block: fill passes per block at most (None: ``block_size - 1``, so at least one
            token per pass).
        temperature: 0 = argmax; > 0 samples from ``softmax(logits / temperature)``.
        top_k, top_p: restrict the distribution before choosing and scoring.
        stop_at_eos: a row stops at its first settled EOS (the rest of its region is padding).
        skip_special_tokens: passed to ``tokenizer.decode`` for ``text``.
        remask: a fill pass may mask again the block's earlier fill tokens that score below its
            new candidates (Mask-Predict, :mod:`xdllm.predict.remasking`; the seed stays).
        entropy_budget: a fill pass also commits, in confidence order, the candidates whose
            entropies sum (less the largest) to at most this many nats (EB-sampler;
            :mod:`xdllm.predict.unmask_count`); None: no budget.
        seed: base of the per-sample random streams.
    """

    def __init__(self, max_new_tokens: int, block_size: int, tokenizer: Tokenizer | None = None,
                 model: nn.Module | None = None, confidence: str | None = "top_prob",
                 threshold: float | None = 0.9, steps_per_block: int | None = None, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, stop_at_eos: bool = True,
                 skip_special_tokens: bool = True, remask: bool = False, entropy_budget: float | None = None,
                 seed: int = 0) -> None:
        where = type(self).__name__
        check_decoding_options(where, max_new_tokens=max_new_tokens, seed=seed, temperature=temperature,
                               top_k=top_k, top_p=top_p,
                               flags={"stop_at_eos": stop_at_eos, "skip_special_tokens": skip_special_tokens,
                                      "remask": remask})
        if block_size < 1:
            raise ValueError(f"{where}: block_size must be >= 1, got {block_size}")
        fill_steps = block_size - 1 if steps_per_block is None else steps_per_block
        if block_size > 1 and fill_steps < 1:
            raise ValueError(f"{where}: steps_per_block must be >= 1 (or null), got {steps_per_block}")
        try:
            check_confidence_options(confidence, threshold)
            check_entropy_budget(entropy_budget)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        self.max_new_tokens = max_new_tokens
        self.block_size = block_size
        self.tokenizer = tokenizer
        self.model = model
        self.confidence = confidence
        self.threshold = threshold
        self.steps_per_block = fill_steps
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.stop_at_eos = stop_at_eos
        self.skip_special_tokens = skip_special_tokens
        self.remask = remask
        self.entropy_budget = entropy_budget
        self.seed = seed

    def _tokenizer(self) -> Tokenizer:
        return require_tokenizer("HybridPredictor", self.tokenizer)

    def _distribution(self, logits: Float[Tensor, "*lead vocab"]) -> Float[Tensor, "*lead vocab"]:
        return final_distribution(logits, self.temperature, self.top_k, self.top_p,
                                  banned_ids=never_generated_ids(self._tokenizer()))

    def _stream_step(self, block: int, fill_pass: int) -> int:
        """The stream counter of a block's seed (``fill_pass = 0``) or of its fill pass ``fill_pass``."""
        return block * (self.steps_per_block + 1) + fill_pass

    def _draws(self, keys: Tensor, stream_step: int, width: int) -> Tensor | None:
        if self.temperature == 0.0:
            return None
        return streams.uniforms(keys, stream_step, streams.Purpose.TOKEN, width)

    def _settle(self, block_ids: Integer[Tensor, "batch block"], running: Bool[Tensor, " batch"]
                ) -> tuple[Integer[Tensor, "batch block"], Bool[Tensor, "batch block"]]:
        """With ``stop_at_eos``: everything after a settled EOS of the block padded."""
        tok = self._tokenizer()
        if not self.stop_at_eos:
            return block_ids, torch.zeros_like(block_ids, dtype=torch.bool)
        valid = running[:, None].expand_as(block_ids)
        return fill_after_eos(block_ids, valid, tok.eos_token_id, tok.mask_token_id, tok.pad_token_id)

    def positions_needed(self, prompt_length: int) -> int:
        """See :func:`~xdllm_models.hybrid.decoding.block_decoding_positions`."""
        return block_decoding_positions(prompt_length, self.max_new_tokens, self.block_size)

    @torch.no_grad()
    def predict(self, batch: Mapping[str, Any], model: nn.Module | None = None,
                history: HistoryRecorder | None = None) -> PredictionDict:
        start = start_block_decoding("HybridPredictor", batch, model, self.model, self.tokenizer,
                                     self.max_new_tokens, self.block_size, self.seed, history)
        model, tok, canvas, keys, cache, tally = (start.model, start.tokenizer, start.canvas, start.keys, start.cache,
                                                  start.tally)
        logits, size = start.prompt_logits, self.block_size
        n_rows, device = canvas.ids.shape[0], canvas.ids.device
        k = history.k if history is not None else 0
        last_column = (canvas.output_start - 1)[:, None, None].expand(-1, 1, logits.shape[-1])
        seed_logits = logits.gather(1, last_column)[:, 0]
        in_block = torch.arange(size, device=device)
        ids = canvas.ids
        finished = torch.zeros(n_rows, dtype=torch.bool, device=device)

        def record(block: int, canvas_ids: Tensor, probs: Tensor, committed: Tensor, scores: Tensor,
                   active: Tensor) -> None:
            if history is not None:
                history.on_step(block_step_state(tally.steps, canvas_ids, canvas, block * size, probs, committed,
                                                 scores, active, k))
            tally.count(active)

        for block in range(start.n_blocks):
            columns, block_positions = start.block_columns(block)
            running = ~finished
            # 1. seed: the causal branch's next token
            probs = self._distribution(seed_logits)
            draws = self._draws(keys, self._stream_step(block, 0), 1)
            seeds = choose_tokens(probs, None if draws is None else draws[:, 0])
            block_ids = torch.full((n_rows, size), tok.mask_token_id, dtype=torch.long, device=device)
            block_ids[:, 0] = seeds
            block_ids = torch.where(running[:, None], block_ids, tok.pad_token_id)
            block_ids, padded = self._settle(block_ids, running)
            ids = ids.scatter(1, columns, block_ids)
            committed = (in_block == 0)[None, :] & running[:, None]
            scores = torch.where(committed, probs.gather(1, seeds[:, None]), 0.0)
            record(block, ids, probs[:, None], committed | padded, scores, running)
            # 2. fill: the diffusion branch over the block, reading the cached prefix
            written_scores = torch.zeros(block_ids.shape, device=device)  # for remasking
            for fill_pass in range(1, self.steps_per_block + 1):
                masked = block_ids == tok.mask_token_id
                active = masked.any(1)
                if not bool(active.any()):  # the pass's one host sync
                    break
                logits = model(block_ids, positions=block_positions, mask_rule=BlockCausalMask(size),
                               kv_cache=cache, write_cache=False)
                block_ids, probs, committed, scores, written_scores = self._fill(
                    logits, block_ids, masked, written_scores, keys, block, fill_pass)
                block_ids, padded = self._settle(block_ids, running)
                ids = ids.scatter(1, columns, block_ids)
                record(block, ids, probs, committed | (padded & masked), scores, active)
            if self.stop_at_eos:
                finished = finished | (block_ids == tok.eos_token_id).any(1)
            if block + 1 == start.n_blocks or (self.stop_at_eos and bool(finished.all())):
                break
            # 3. append: the finished block into the cache, causally; its last logit seeds the next
            logits = model(block_ids, positions=block_positions, mask_rule=CausalMask(), kv_cache=cache)
            seed_logits = logits[:, -1]

        in_region = canvas.window_valid.new_zeros(ids.shape).scatter(1, canvas.window_index, canvas.window_valid)
        ids = torch.where(in_region & (ids == tok.mask_token_id), tok.pad_token_id, ids)  # never generated
        return start.finish(ids, tally.steps_taken, self.skip_special_tokens, history)

    def _fill(self, logits: Float[Tensor, "batch block vocab"], block_ids: Integer[Tensor, "batch block"],
              masked: Bool[Tensor, "batch block"], written_scores: Float[Tensor, "batch block"],
              keys: Integer[Tensor, " batch"], block: int, fill_pass: int
              ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """One fill pass: the block with this pass's commits (and, with ``remask``, the earlier
        fill tokens it took back), the distribution, the commits, the candidates' scores and the
        score of each token as written."""
        size = block_ids.shape[1]
        stream_step = self._stream_step(block, fill_pass)
        probs = self._distribution(logits)
        tokens = choose_tokens(probs, self._draws(keys, stream_step, size))
        if self.confidence is None:
            scores = streams.uniforms(keys, stream_step, streams.Purpose.ORDER, size)
        else:
            scores = token_confidence(self.confidence, probs, tokens)
        passes_left = torch.full_like(keys, self.steps_per_block - fill_pass + 1)
        count = scheduled_count(masked.sum(1), passes_left, torch.full_like(keys, self.steps_per_block), None)
        committed = select_positions(scores, masked, count, self.threshold, probs, self.entropy_budget)
        if self.remask:
            fill_offsets = (torch.arange(size, device=masked.device) > 0)[None, :].expand_as(masked)  # the seed stays
            remasked = remask_lowest(block_ids, tokens, scores, written_scores, masked, committed, fill_offsets,
                                     self._tokenizer().mask_token_id)
            return (remasked.window, probs, remasked.committed, torch.where(masked, scores, 0.0),
                    remasked.written_scores)
        return (torch.where(committed, tokens, block_ids), probs, committed, torch.where(masked, scores, 0.0),
                written_scores)
