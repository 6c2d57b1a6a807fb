"""``ARPredictor``: left-to-right decoding with a KV cache.

The prompt (left- or right-padded ``[bos] + prompt`` rows, as :class:`~xdllm.collate.PromptCollator`
makes them) is run once through the network under :class:`~xdllm.nn.CausalMask`, filling a
:class:`~xdllm.nn.KVCache`; padding slots carry the padding document id, so no real token ever
attends to them. Each step then commits one token per row, drawn from the final distribution
of the row's last logit (temperature, top-k, top-p as in :mod:`xdllm.predict.sampling`; the mask
token is never chosen), writes it into the canvas after the prompt, and runs the network on that
one token at the row's next position, appending it to the cache. So a row costs one forward
pass per generated token (the prompt's pass gives the first), never a pass over the whole
sequence.

The canvas, records, metrics and history are those of the diffusion families: the output region
holds ``max_new_tokens`` mask tokens after each prompt, filled left to right; a history recorder
sees after each step the top-k of the distribution the committed token came from, at that
token's offset. With ``stop_at_eos`` a row is finished once it commits EOS (the rest of its
region is padding); decoding stops when every row is finished, which costs one host
synchronisation per step (none without ``stop_at_eos``). Random draws come from the per-sample
streams of :mod:`xdllm.predict.streams`, keyed by ``(seed, sample_index)`` and the offset, so a
sample's output does not depend on its batch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn

from xdllm.interfaces import DenoisingStep, HistoryRecorder, PredictionDict, Tokenizer
from xdllm.nn import CausalMask
from xdllm.predict import streams
from xdllm.predict.canvas import Canvas, continuation_canvas
from xdllm.predict.inputs import check_decoding_options, predictor_inputs, require_tokenizer, sample_indices
from xdllm.predict.sampling import choose_tokens, final_distribution, never_generated_ids
from xdllm.predict.text import decode_regions


class ARPredictor:
    """Autoregressive generation with a KV cache; see the module docstring.

    Args:
        max_new_tokens: tokens generated per prompt at most (the output region's length).
        tokenizer: pad / mask / bos / eos ids, and decoding.
        model: default model (a :class:`~xdllm.nn.RotaryTransformer`: ``new_kv_cache`` and the
            ``kv_cache`` / ``mask_rule`` arguments); ``predict(model=...)`` overrides it.
        temperature: 0 = greedy (argmax); > 0 samples from ``softmax(logits / temperature)``.
        top_k, top_p: restrict the distribution to the k most probable tokens, then to the
            smallest set reaching probability mass ``top_p`` (None: no restriction).
        stop_at_eos: a row stops at its first EOS (False: every row generates ``max_new_tokens``;
            the text is still cut after the first EOS).
        skip_special_tokens: passed to ``tokenizer.decode`` for ``text``.
        seed: base of the per-sample random streams (used when ``temperature > 0``).
    """

    def __init__(self, max_new_tokens: int, tokenizer: Tokenizer | None = None, model: nn.Module | None = None,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 stop_at_eos: bool = True, skip_special_tokens: bool = True, seed: int = 0) -> None:
        check_decoding_options("ARPredictor", max_new_tokens=max_new_tokens, seed=seed, temperature=temperature,
                               top_k=top_k, top_p=top_p,
                               flags={"stop_at_eos": stop_at_eos, "skip_special_tokens": skip_special_tokens})
        self.max_new_tokens = max_new_tokens
        self.tokenizer = tokenizer
        self.model = model
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.stop_at_eos = stop_at_eos
        self.skip_special_tokens = skip_special_tokens
        self.seed = seed

    def _tokenizer(self) -> Tokenizer:
        return require_tokenizer("ARPredictor", self.tokenizer)

    def _distribution(self, logits: Float[Tensor, "batch vocab"]) -> Float[Tensor, "batch vocab"]:
        return final_distribution(logits, self.temperature, self.top_k, self.top_p,
                                  banned_ids=never_generated_ids(self._tokenizer()))

    @torch.no_grad()
    def predict(self, batch: Mapping[str, Any], model: nn.Module | None = None,
                history: HistoryRecorder | None = None) -> PredictionDict:
        start_time = time.perf_counter()
        model, tok = predictor_inputs("ARPredictor", batch, model, self.model, self.tokenizer)
        device = next(model.parameters()).device
        prompt_ids = batch["input_ids"].to(device)
        prompt_real = batch["attention_mask"].to(device).bool()
        new_tokens = self.max_new_tokens
        canvas = continuation_canvas(prompt_ids, prompt_real, new_tokens, tok.pad_token_id, tok.mask_token_id)
        n_rows, prompt_len = prompt_ids.shape
        if bool((canvas.output_start == 0).any()):
            raise ValueError("ARPredictor: every prompt row needs at least one real token (bos) "
                             "to predict the first token from")
        keys = streams.row_keys(self.seed, sample_indices("ARPredictor", batch, n_rows, device))
        draws = (streams.uniforms(keys, 0, streams.Purpose.TOKEN, new_tokens)
                 if self.temperature > 0.0 else None)
        k = history.k if history is not None else 0
        if history is not None:
            history.begin(batch, canvas.ids, canvas.output_start)

        rule = CausalMask()
        cache = model.new_kv_cache(n_rows, prompt_len + new_tokens)
        logits = model(prompt_ids, attention_mask=prompt_real, positions=canvas.positions[:, :prompt_len],
                       mask_rule=rule, kv_cache=cache)
        last_column = (canvas.output_start - 1)[:, None, None].expand(-1, 1, logits.shape[-1])
        last_logits = logits.gather(1, last_column)[:, 0]
        next_position = canvas.positions.gather(1, canvas.output_start[:, None])  # the first new token's
        ids = canvas.ids
        finished = torch.zeros(n_rows, dtype=torch.bool, device=device)
        steps_taken = torch.zeros(n_rows, dtype=torch.long, device=device)
        elapsed: list[float] = []
        for step in range(new_tokens):
            probs = self._distribution(last_logits)
            tokens = choose_tokens(probs, None if draws is None else draws[:, step])
            active = ~finished
            tokens = torch.where(active, tokens, tok.pad_token_id)
            ids = ids.scatter(1, (canvas.output_start + step)[:, None], tokens[:, None])
            steps_taken += active.long()
            if self.stop_at_eos:
                finished = finished | (tokens == tok.eos_token_id)
            if history is not None:
                history.on_step(_step_state(step, ids, canvas, probs, tokens, active, k))
            elapsed.append(time.perf_counter() - start_time)
            if step + 1 == new_tokens or (self.stop_at_eos and bool(finished.all())):  # the step's one sync
                break
            logits = model(tokens[:, None], positions=next_position + step, mask_rule=rule, kv_cache=cache)
            last_logits = logits[:, -1]

        in_region = canvas.window_valid.new_zeros(ids.shape).scatter(1, canvas.window_index, canvas.window_valid)
        ids = torch.where(in_region & (ids == tok.mask_token_id), tok.pad_token_id, ids)  # never generated
        steps = steps_taken.tolist()
        prediction: PredictionDict = {
            "loss": None,
            "text": decode_regions(tok, ids, canvas.output_start, canvas.region_len, self.skip_special_tokens),
            "ids": ids,
            "time_taken": [elapsed[s - 1] for s in steps],
            "output_start_idx": canvas.output_start,
            "steps_taken": steps,
        }
        if history is not None:
            history.end(prediction)
        return prediction


def _step_state(step: int, ids: Integer[Tensor, "batch seq_len"], canvas: Canvas,
                probs: Float[Tensor, "batch vocab"], tokens: Integer[Tensor, " batch"],
                active: Bool[Tensor, " batch"], k: int) -> DenoisingStep:
    """What a history recorder keeps of one step: the top-k and the committed token at offset
    ``step`` of the rows that ran; zeros (False) everywhere else. No host transfer."""
    vocab = probs.shape[-1]
    if not 1 <= k <= vocab:
        raise ValueError(f"history recorder asks for the top k={k} tokens per position; "
                         f"k must be in 1..{vocab} (the vocabulary size)")
    top = probs.topk(k, dim=-1)
    n_rows, width = canvas.window_valid.shape
    here = torch.zeros((n_rows, width), dtype=torch.bool, device=ids.device)
    here[:, step] = active
    chosen = probs.gather(1, tokens[:, None])[:, 0]
    return DenoisingStep(
        step=step, canvas=ids, output_start=canvas.output_start, window_valid=canvas.window_valid,
        topk_ids=torch.where(here[..., None], top.indices[:, None], 0),
        topk_probs=torch.where(here[..., None], top.values[:, None], 0.0),
        committed=here, confidence=torch.where(here, chosen[:, None], 0.0), active=active)
