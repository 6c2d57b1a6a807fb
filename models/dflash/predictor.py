"""``SpeculativePredictor``: speculative decoding of the frozen target with the drafter.

The target encodes the prompt into its :class:`~xdllm.nn.KVCache` and picks the first token;
that token is the first *anchor*. Then, round after round:

1. **draft**: one drafter pass over ``[anchor, MASK x (block_size - 1)]`` at the anchor's
   positions, reading the target's features of every token before the anchor, gives the
   drafter's distributions ``q_1 .. q_{bs-1}`` (through the target's LM head) and drafts
   ``d_1 .. d_{bs-1}`` from them;
2. **verify**: one cached target pass over ``[anchor, d_1 .. d_{bs-1}]`` gives the target's
   distributions ``p_1 .. p_bs`` after each of them;
3. **accept** a prefix of ``n`` drafts and one token of the target's: ``n + 1`` tokens, cut at
   the output budget and after EOS. The last one is the next anchor.

Both distributions are the final ones of :mod:`xdllm.predict.sampling` (temperature, top-k,
top-p, the mask token banned). At ``temperature == 0`` drafts are argmaxes, the accepted prefix
is the longest with ``d_i == argmax p_i`` and the target's token ``argmax p_{n+1}``: every
committed token is the target's own greedy choice given the committed tokens before it, so the
output is the target's greedy decoding, token for token (up to floating-point ties: the
verification pass scores ``block_size`` tokens at once, the target alone one at a time).

At ``temperature > 0`` (speculative sampling, Leviathan et al. 2023, Chen et al. 2023) drafts
are drawn ``d_i ~ q_i``, each is accepted with probability ``min(1, p_i(d_i) / q_i(d_i))`` in
order up to the first rejection, and the target's token is drawn at the first rejected position
from ``max(0, p_i - q_i)`` renormalised (``p_i`` itself when that is zero everywhere, which
happens only when ``p_i == q_i``), or from ``p_bs`` when every draft was accepted
(:mod:`~xdllm_models.dflash.acceptance`). Each committed token is then distributed exactly as
the target's sample given the tokens before it: the output has the distribution of sampling the
target alone with the same options. Every draw is a uniform of the sample's own stream
(:mod:`xdllm.predict.streams`, keyed by the seed and the sample index; the first token from
step 0, as :class:`~xdllm_models.arlm.predictor.ARPredictor` draws it, then per round one stream
step each for the drafts, the acceptances and the target's tokens), so a sample's output does
not depend on its batch.

The cache holds one slot per verified token for every row: after a round the anchor and the
accepted drafts of a row stay, its rejected drafts become padding slots (never attended), and
the cache's fill length rolls back to the row that kept most. The target's features at the kept
slots are the drafter's context, slot for slot; the drafter keeps its keys and values of them
across rounds and projects only the slots verified since its last draft (``drafter_cache``),
attending without a mask until a row has a padding slot or finishes.
Rows finish independently; the loop ends when every row is finished (one host synchronisation
per round).

History: the prompt pass is step 0 (the first token committed); then each round records two
steps, the draft (the drafted tokens committed, with the drafter's top-k) and the verification
(the accepted tokens and the target's token committed with the target's top-k; rejected drafts
are masks again), so the views show drafted against accepted tokens per verification.

``speculative=False`` decodes with the target alone (:class:`~xdllm_models.arlm.predictor.ARPredictor`,
with the same sampling options and seed), the baseline of the speedup.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from enum import IntEnum
from typing import Any

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn

from xdllm.interfaces import DenoisingStep, HistoryRecorder, Tokenizer
from xdllm.nn import PAD_DOCUMENT_ID, RotaryTransformer
from xdllm.predict import streams
from xdllm.predict.canvas import continuation_canvas
from xdllm.predict.inputs import check_decoding_options, predictor_inputs, sample_indices
from xdllm.predict.sampling import choose_tokens, final_distribution, never_generated_ids
from xdllm.predict.text import decode_regions
from xdllm_models.arlm.predictor import ARPredictor
from xdllm_models.dflash.acceptance import greedy_acceptance, speculative_sampling
from xdllm_models.dflash.context_cache import DrafterContextCache
from xdllm_models.dflash.mask import block_tokens, context_tokens
from xdllm_models.dflash.model import DFlashDrafter
from xdllm_models.dflash.target import require_target, verify_pass
from xdllm_models.dflash.types import SpeculativePredictionDict


class StreamUse(IntEnum):
    """What a round's uniforms decide; round ``r`` draws from stream step ``3 r + use`` (the
    prompt's token from step 0), so no two uses share a draw."""

    DRAFT = 0
    ACCEPT = 1
    TARGET_TOKEN = 2


class SpeculativePredictor:
    """Draft-and-verify decoding, greedy or sampled; see the module docstring.

    Args:
        max_new_tokens: tokens generated per prompt at most (the output region's length).
        tokenizer: pad / mask / bos / eos ids, and decoding.
        model: default drafter; ``predict(model=...)`` overrides it.
        block_size: tokens per drafted block, anchor included (None: the drafter's).
        speculative: False decodes with the target alone (the baseline).
        temperature: 0 = greedy (argmax); > 0 samples the target's distribution
            ``softmax(logits / temperature)`` by speculative sampling.
        top_k, top_p: restrict both models' distributions to the k most probable tokens, then to
            the smallest set reaching probability mass ``top_p`` (None: no restriction).
        stop_at_eos: a row stops at its first EOS.
        skip_special_tokens: passed to ``tokenizer.decode`` for ``text``.
        seed: base of the per-sample random streams (used when ``temperature > 0``).
        drafter_cache: keep the drafter's context keys and values across rounds
            (:mod:`~xdllm_models.dflash.context_cache`; False recomputes them every draft).
    """

    def __init__(self, max_new_tokens: int, tokenizer: Tokenizer | None = None, model: nn.Module | None = None,
                 block_size: int | None = None, speculative: bool = True, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, stop_at_eos: bool = True,
                 skip_special_tokens: bool = True, seed: int = 0, drafter_cache: bool = True) -> None:
        check_decoding_options("SpeculativePredictor", max_new_tokens=max_new_tokens, seed=seed,
                               temperature=temperature, top_k=top_k, top_p=top_p,
                               flags={"speculative": speculative, "stop_at_eos": stop_at_eos,
                                      "skip_special_tokens": skip_special_tokens, "drafter_cache": drafter_cache})
        if block_size is not None and block_size < 2:
            raise ValueError(f"SpeculativePredictor: block_size must be >= 2 or None, got {block_size}")
        self.max_new_tokens = max_new_tokens
        self.tokenizer = tokenizer
        self.model = model
        self.block_size = block_size
        self.speculative = speculative
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.stop_at_eos = stop_at_eos
        self.skip_special_tokens = skip_special_tokens
        self.seed = seed
        self.drafter_cache = drafter_cache

    @torch.no_grad()
    def predict(self, batch: Mapping[str, Any], model: nn.Module | None = None,
                history: HistoryRecorder | None = None,
                frozen: Mapping[str, nn.Module] | None = None) -> SpeculativePredictionDict:
        drafter, tok = predictor_inputs("SpeculativePredictor", batch, model, self.model, self.tokenizer)
        target = require_target(dict(frozen or {}), "SpeculativePredictor")
        if not self.speculative:
            return self._target_alone(batch, target, tok, history)
        if not isinstance(drafter, DFlashDrafter):
            raise TypeError(f"SpeculativePredictor: the model must be a DFlashDrafter, got {type(drafter).__name__}")
        return _SpeculativeRun(self, drafter, target, tok, batch, history).decode()

    def _target_alone(self, batch: Mapping[str, Any], target: RotaryTransformer, tok: Tokenizer,
                      history: HistoryRecorder | None) -> SpeculativePredictionDict:
        baseline = ARPredictor(self.max_new_tokens, tok, temperature=self.temperature, top_k=self.top_k,
                               top_p=self.top_p, stop_at_eos=self.stop_at_eos,
                               skip_special_tokens=self.skip_special_tokens, seed=self.seed)
        prediction = baseline.predict(batch, model=target, history=history)
        steps = list(prediction["steps_taken"])
        return SpeculativePredictionDict(**prediction, target_passes=steps, draft_passes=[0] * len(steps),
                                         generated_tokens=steps)


class _SpeculativeRun:
    """The state of one batch's speculative decoding (see the module docstring)."""

    def __init__(self, options: SpeculativePredictor, drafter: DFlashDrafter, target: RotaryTransformer,
                 tok: Tokenizer, batch: Mapping[str, Any], history: HistoryRecorder | None) -> None:
        self.started = time.perf_counter()
        self.options, self.drafter, self.target, self.tok, self.history = options, drafter, target, tok, history
        self.batch = batch
        self.block_size = options.block_size or drafter.block_size
        self.banned = never_generated_ids(tok)
        device = next(target.parameters()).device
        self.prompt_ids = batch["input_ids"].to(device)
        self.prompt_real = batch["attention_mask"].to(device).bool()
        self.new_tokens = options.max_new_tokens
        self.canvas = continuation_canvas(self.prompt_ids, self.prompt_real, self.new_tokens, tok.pad_token_id,
                                          tok.mask_token_id)
        if bool((self.canvas.output_start == 0).any()):
            raise ValueError("SpeculativePredictor: every prompt row needs at least one real token (bos)")
        last_position = int(self.canvas.positions.max()) + self.block_size
        limit = target.config.max_positions
        if last_position >= limit:
            raise ValueError(f"SpeculativePredictor: prompts plus max_new_tokens={self.new_tokens} and a block of "
                             f"{self.block_size} reach position {last_position}; the target has "
                             f"max_positions={limit}")
        rows, prompt_len = self.prompt_ids.shape
        self.cache = target.new_kv_cache(rows, prompt_len + self.new_tokens * self.block_size)
        self.context_cache = (DrafterContextCache(prompt_len + (self.new_tokens + 1) * self.block_size,
                                                  every_slot_seen=True)
                              if options.drafter_cache else None)  # as many slots as the target's, and a block
        self.features: Tensor | None = None  # the target's features, slot for slot with the cache
        self.k = history.k if history is not None else 0
        self.step = 0
        self.round = 0
        self.sampling = options.temperature > 0.0
        self.keys = streams.row_keys(options.seed, sample_indices("SpeculativePredictor", batch, rows, device))

    def decode(self) -> SpeculativePredictionDict:
        canvas, bs = self.canvas, self.block_size
        rows = canvas.ids.shape[0]
        device = canvas.ids.device
        if self.history is not None:
            self.history.begin(self.batch, canvas.ids, canvas.output_start)
        prompt_len = self.prompt_ids.shape[1]
        logits = self._verify(self.prompt_ids, canvas.positions[:, :prompt_len], self.prompt_real)
        last = logits.gather(1, (canvas.output_start - 1)[:, None, None].expand(-1, 1, logits.shape[-1]))
        probs = self._distribution(last)  # [rows, 1, vocab]
        first = choose_tokens(probs, self._draws(0, 1))
        filled = torch.zeros(rows, dtype=torch.long, device=device)
        everyone = torch.ones(rows, dtype=torch.bool, device=device)
        ids, count = self._commit(canvas.ids, first, probs, filled, everyone[:, None], everyone)
        anchor, anchor_position = first[:, 0], canvas.positions.gather(1, canvas.output_start[:, None])[:, 0]
        filled = filled + count
        finished = self._finished(ids, filled)
        target_passes = torch.ones(rows, dtype=torch.long, device=device)
        draft_passes = torch.zeros(rows, dtype=torch.long, device=device)
        offsets = torch.arange(bs, device=device)
        elapsed = [time.perf_counter() - self.started]
        done, all_seen = torch.stack([finished.all(), ~finished.any() & self.prompt_real.all()]).tolist()
        self._context_seen(all_seen)
        while not done:
            self.round += 1
            active = ~finished
            drafts, draft_probs = self._draft(anchor, anchor_position, active)
            draft_passes += active.long()
            if self.history is not None:
                drafted = active[:, None].expand_as(drafts)
                self._record(self._place(ids, drafts, filled, drafted), draft_probs, filled, drafted,
                             torch.zeros_like(drafted), active)
            start = self.cache.length
            logits = self._verify(torch.cat([anchor[:, None], drafts], dim=1), anchor_position[:, None] + offsets,
                                  None)
            probs = self._distribution(logits)
            tokens, accepted = self._accept(drafts, draft_probs, probs)
            ids, count = self._commit(ids, tokens, probs, filled, offsets <= accepted[:, None], active)
            target_passes += active.long()
            kept = offsets < count[:, None]  # the anchor and the accepted drafts stay in the cache
            slots = slice(start, start + bs)
            self.cache.document[:, slots] = torch.where(kept, self.cache.document[:, slots], PAD_DOCUMENT_ID)
            anchor = tokens.gather(1, (count - 1).clamp_min(0)[:, None])[:, 0]
            anchor_position = anchor_position + count
            filled = filled + count
            finished = finished | self._finished(ids, filled)
            longest, done, all_seen = torch.stack(  # the round's one sync
                [count.max(), finished.all().long(), ((count == count.max()).all() & ~finished.any()).long()]).tolist()
            self.cache.length = start + longest  # roll back to the row that kept most
            self._context_seen(bool(all_seen))
            elapsed.append(time.perf_counter() - self.started)
        return self._prediction(ids, target_passes, draft_passes, filled, elapsed)

    def _context_seen(self, all_seen: bool) -> None:
        """Tell the drafter cache once a row stops seeing every context slot (a padding slot,
        or a finished row): from then on its passes are masked."""
        if self.context_cache is not None and not all_seen:
            self.context_cache.every_slot_seen = False

    def _distribution(self, logits: Float[Tensor, "batch new vocab"]) -> Float[Tensor, "batch new vocab"]:
        options = self.options
        return final_distribution(logits, options.temperature, options.top_k, options.top_p, self.banned)

    def _draws(self, stream_step: int, width: int) -> Float[Tensor, "batch width"] | None:
        """The rows' uniforms of one stream step when sampling (None: greedy)."""
        if not self.sampling:
            return None
        return streams.uniforms(self.keys, stream_step, streams.Purpose.TOKEN, width)

    def _round_draws(self, use: StreamUse, width: int) -> Float[Tensor, "batch width"] | None:
        return self._draws(3 * self.round + int(use), width)

    def _accept(self, drafts: Integer[Tensor, "batch drafted"], draft_probs: Float[Tensor, "batch drafted vocab"],
                probs: Float[Tensor, "batch block vocab"]
                ) -> tuple[Integer[Tensor, "batch block"], Integer[Tensor, " batch"]]:
        """The round's tokens (the accepted drafts, then the target's token) and how many drafts
        each row accepts (:mod:`~xdllm_models.dflash.acceptance`)."""
        if not self.sampling:
            return greedy_acceptance(drafts, probs)
        return speculative_sampling(drafts, draft_probs, probs, self._round_draws(StreamUse.ACCEPT, drafts.shape[1]),
                                    self._round_draws(StreamUse.TARGET_TOKEN, probs.shape[1]))

    def _verify(self, token_ids: Integer[Tensor, "batch new"], positions: Integer[Tensor, "batch new"],
                attention_mask: Bool[Tensor, "batch new"] | None) -> Float[Tensor, "batch new vocab"]:
        """A cached target pass; its features are stored beside the cache slots it wrote."""
        start = self.cache.length
        if self.context_cache is not None:
            self.context_cache.rewind(start)  # the slots this pass writes
        logits, features = verify_pass(self.target, self.drafter.target_layers, token_ids, positions, self.cache,
                                       attention_mask)
        if self.features is None:
            self.features = features.new_zeros((*self.cache.document.shape, features.shape[-1]))
        self.features[:, start:start + token_ids.shape[1]] = features
        return logits

    def _draft(self, anchor: Integer[Tensor, " batch"], anchor_position: Integer[Tensor, " batch"],
               active: Bool[Tensor, " batch"]
               ) -> tuple[Integer[Tensor, "batch drafted"], Float[Tensor, "batch drafted vocab"]]:
        """One drafter pass: the drafts after the anchor and the distributions they come from."""
        bs, length = self.block_size, self.cache.length
        queries = block_tokens(anchor_position[:, None], bs)
        queries = queries._replace(document=torch.where(active[:, None], queries.document, PAD_DOCUMENT_ID))
        block_ids = torch.full((anchor.shape[0], bs), self.tok.mask_token_id, dtype=torch.long, device=anchor.device)
        block_ids[:, 0] = anchor
        context = context_tokens(self.cache.document[:, :length], self.cache.position[:, :length])
        assert self.features is not None
        hidden = self.drafter(self.target.token_embedding(block_ids), queries, self.features[:, :length], context,
                              self.context_cache)
        probs = self._distribution(self.drafter.logits(hidden[:, 1:], self.target))
        return choose_tokens(probs, self._round_draws(StreamUse.DRAFT, bs - 1)), probs

    def _commit(self, ids: Integer[Tensor, "batch seq_len"], tokens: Integer[Tensor, "batch new"],
                probs: Float[Tensor, "batch new vocab"], filled: Integer[Tensor, " batch"],
                offered: Bool[Tensor, "batch new"], active: Bool[Tensor, " batch"]
                ) -> tuple[Integer[Tensor, "batch seq_len"], Integer[Tensor, " batch"]]:
        """Write the offered tokens of active rows after their ``filled`` ones, within the
        budget and up to the first EOS; return the canvas and how many each row took."""
        width = tokens.shape[1]
        offsets = torch.arange(width, device=tokens.device)
        take = offered & active[:, None] & (offsets < (self.new_tokens - filled)[:, None])
        if self.options.stop_at_eos:
            eos = (tokens == self.tok.eos_token_id) & take
            take = take & ((eos.long().cumsum(dim=1) - eos.long()) == 0)  # nothing after the first EOS
        take = take & (take.long().cumprod(dim=1) == 1)  # a prefix
        ids = self._place(ids, tokens, filled, take)
        if self.history is not None:
            self._record(ids, probs, filled, take, take, active)
        return ids, take.sum(dim=1)

    def _place(self, ids: Integer[Tensor, "batch seq_len"], tokens: Integer[Tensor, "batch new"],
               filled: Integer[Tensor, " batch"], take: Bool[Tensor, "batch new"]) -> Integer[Tensor, "batch seq_len"]:
        """``ids`` with ``tokens`` written at output offsets ``filled + i`` where ``take`` and
        inside the region (written into a row widened by the tokens, so no two land on one column)."""
        rows, width = tokens.shape
        offsets = filled[:, None] + torch.arange(width, device=tokens.device)
        take = take & (offsets < self.new_tokens)
        widened = torch.cat([ids, ids.new_zeros((rows, width))], dim=1)
        columns = self.canvas.output_start[:, None] + offsets
        widened = widened.scatter(1, columns, torch.where(take, tokens, widened.gather(1, columns)))
        return widened[:, :ids.shape[1]]

    def _finished(self, ids: Integer[Tensor, "batch seq_len"], filled: Integer[Tensor, " batch"]
                  ) -> Bool[Tensor, " batch"]:
        """Rows whose budget is spent, or (with ``stop_at_eos``) that committed EOS."""
        done = filled >= self.new_tokens
        if self.options.stop_at_eos:
            region = ids.gather(1, self.canvas.window_index)
            done = done | ((region == self.tok.eos_token_id) & self.canvas.window_valid).any(dim=1)
        return done

    def _record(self, ids: Integer[Tensor, "batch seq_len"], probs: Float[Tensor, "batch new vocab"],
                filled: Integer[Tensor, " batch"], scored: Bool[Tensor, "batch new"],
                committed: Bool[Tensor, "batch new"], active: Bool[Tensor, " batch"]) -> None:
        """One history step: the top-k of ``probs`` at the ``scored`` offsets ``filled + i``, of
        which ``committed`` ones are commits (a draft step commits none: its tokens are on the
        canvas as proposals, shown as changed without a commit until the verification)."""
        assert self.history is not None
        vocab = probs.shape[-1]
        if not 1 <= self.k <= vocab:
            raise ValueError(f"history recorder asks for the top k={self.k} tokens per position; "
                             f"k must be in 1..{vocab} (the vocabulary size)")
        top = probs.topk(self.k, dim=-1)
        chosen = probs.max(dim=-1).values
        scored, committed = scored & active[:, None], committed & active[:, None]
        canvas = self.canvas
        region = canvas.window_valid.shape[1]
        self.history.on_step(DenoisingStep(
            step=self.step, canvas=ids, output_start=canvas.output_start, window_valid=canvas.window_valid,
            topk_ids=_at_offsets(top.indices, filled, scored, region),
            topk_probs=_at_offsets(top.values, filled, scored, region),
            committed=_at_offsets(committed, filled, committed, region),
            confidence=_at_offsets(chosen, filled, committed, region), active=active))
        self.step += 1

    def _prediction(self, ids: Integer[Tensor, "batch seq_len"], target_passes: Tensor, draft_passes: Tensor,
                    filled: Tensor, elapsed: list[float]) -> SpeculativePredictionDict:
        canvas, tok = self.canvas, self.tok
        in_region = canvas.window_valid.new_zeros(ids.shape).scatter(1, canvas.window_index, canvas.window_valid)
        ids = torch.where(in_region & (ids == tok.mask_token_id), tok.pad_token_id, ids)  # never generated
        targets, drafts, generated = target_passes.tolist(), draft_passes.tolist(), filled.tolist()
        prediction = SpeculativePredictionDict(
            loss=None,
            text=decode_regions(tok, ids, canvas.output_start, canvas.region_len, self.options.skip_special_tokens),
            ids=ids,
            time_taken=[elapsed[passes - 1] for passes in targets],
            output_start_idx=canvas.output_start,
            steps_taken=[t + d for t, d in zip(targets, drafts)],
            target_passes=targets,
            draft_passes=drafts,
            generated_tokens=generated,
        )
        if self.history is not None:
            self.history.end(prediction)
        return prediction


def _at_offsets(values: Tensor, filled: Integer[Tensor, " batch"], keep: Bool[Tensor, "batch new"],
                region: int) -> Tensor:
    """``values[:, i]`` placed at window offsets ``filled + i`` where ``keep`` (zeros elsewhere),
    as a ``[batch, region, ...]`` tensor."""
    rows, width = keep.shape
    offsets = filled[:, None] + torch.arange(width, device=keep.device)
    trailing = values.shape[2:]
    placed = values.new_zeros((rows, region + width, *trailing))
    kept = values.masked_fill(~keep.view(rows, width, *([1] * len(trailing))), 0)
    index = offsets.view(rows, width, *([1] * len(trailing))).expand_as(values)
    return placed.scatter(1, index, kept)[:, :region]
