"""The start of block-wise decoding on block-aligned positions, shared by the hybrid and udlm
predictors: the canvas (the answer rounded up to whole blocks), positions shifted so that the
answer starts a block, the per-sample streams, the history's start, the prompt's causal pass
into a fresh KV cache, the pass tally, and the prediction the decoding ends with."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Integer
from torch import Tensor, nn

from xdllm.interfaces import HistoryRecorder, PredictionDict, Tokenizer
from xdllm.nn import CausalMask
from xdllm.predict import streams
from xdllm.predict.block_steps import PassTally
from xdllm.predict.blocks import whole_blocks
from xdllm.predict.canvas import Canvas, continuation_canvas
from xdllm.predict.inputs import check_positions_fit, predictor_inputs, sample_indices
from xdllm.predict.text import decode_regions
from xdllm_models.hybrid.layout import block_aligned_positions


@dataclass(frozen=True)
class BlockDecodingStart:
    """What a batch's decoding starts from; ``prompt_logits`` are the prompt pass's logits,
    ``cache`` is whatever ``model.new_kv_cache`` returned (handed back to the model only) and
    ``tally`` counts the passes from the start of the call."""

    model: nn.Module
    tokenizer: Tokenizer
    canvas: Canvas
    positions: Integer[Tensor, "batch seq_len"]
    keys: Integer[Tensor, " batch"]
    cache: Any
    prompt_logits: Float[Tensor, "batch prompt vocab"]
    n_blocks: int
    block_size: int
    tally: PassTally

    def block_columns(self, block: int) -> tuple[Integer[Tensor, "batch block"], Integer[Tensor, "batch block"]]:
        """The canvas columns of output block ``block`` in every row, and their positions."""
        offsets = torch.arange(self.block_size, device=self.positions.device)
        columns = self.canvas.output_start[:, None] + block * self.block_size + offsets
        return columns, self.positions.gather(1, columns)

    def finish(self, ids: Integer[Tensor, "batch seq_len"], steps_taken: Integer[Tensor, " batch"],
               skip_special_tokens: bool, history: HistoryRecorder | None) -> PredictionDict:
        """The prediction of the finished canvas ``ids`` (handed to the history recorder too)."""
        canvas = self.canvas
        prediction: PredictionDict = {
            "loss": None,
            "text": decode_regions(self.tokenizer, ids, canvas.output_start, canvas.region_len, skip_special_tokens),
            "ids": ids,
            "time_taken": self.tally.time_taken(),
            "output_start_idx": canvas.output_start,
            "steps_taken": steps_taken.tolist(),
        }
        if history is not None:
            history.end(prediction)
        return prediction


def block_decoding_positions(prompt_length: int, max_new_tokens: int, block_size: int) -> int:
    """Positions a generation from ``prompt_length`` tokens (bos included) uses: the answer
    starts on a block boundary and fills ``max_new_tokens`` rounded up to whole blocks."""
    return whole_blocks(prompt_length, block_size) + whole_blocks(max_new_tokens, block_size)


def start_block_decoding(owner: str, batch: Mapping[str, Any], model: nn.Module | None,
                         default_model: nn.Module | None, tokenizer: Tokenizer | None, max_new_tokens: int,
                         block_size: int, seed: int, history: HistoryRecorder | None) -> BlockDecodingStart:
    """Check the inputs (naming ``owner``), lay out the canvas and run the prompt pass."""
    start_time = time.perf_counter()
    model, tok = predictor_inputs(owner, batch, model, default_model, tokenizer)
    device = next(model.parameters()).device
    prompt_ids = batch["input_ids"].to(device)
    prompt_real = batch["attention_mask"].to(device).bool()
    n_blocks = -(-max_new_tokens // block_size)
    canvas = continuation_canvas(prompt_ids, prompt_real, n_blocks * block_size, tok.pad_token_id,
                                 tok.mask_token_id)
    n_rows, prompt_len = prompt_ids.shape
    if bool((canvas.output_start == 0).any()):
        raise ValueError(f"{owner}: every prompt row needs at least one real token (bos): the first "
                         "token is predicted from the prompt's causal pass")
    response_start = canvas.positions.gather(1, canvas.output_start[:, None])[:, 0]
    positions = block_aligned_positions(canvas.positions, response_start, block_size)
    check_positions_fit(owner, model, positions)
    keys = streams.row_keys(seed, sample_indices(owner, batch, n_rows, device))
    if history is not None:
        history.begin(batch, canvas.ids, canvas.output_start)
    cache = model.new_kv_cache(n_rows, prompt_len + n_blocks * block_size)
    logits = model(prompt_ids, attention_mask=prompt_real, positions=positions[:, :prompt_len],
                   mask_rule=CausalMask(), kv_cache=cache)
    return BlockDecodingStart(model, tok, canvas, positions, keys, cache, logits, n_blocks, block_size,
                              PassTally(n_rows, device, start_time))
