"""``xdllm generate ... live=true``: the first sample's denoising drawn in the terminal while it
is generated, in the frames of :mod:`xdllm.history.live`.

:class:`LiveRecorder` is a history recorder that draws row 0 of the first batch after every
step and hands every call on to the recorder it wraps (the ``history=topk`` one, if any). It
reads one row back to the host per step, which only a watched generation pays for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from jaxtyping import Integer
from rich.console import Console
from rich.live import Live
from rich.text import Text
from torch import Tensor

from xdllm.data.tokenizer import token_display
from xdllm.history.live import frame, legend
from xdllm.history.render import output_text
from xdllm.interfaces import DenoisingStep, HistoryRecorder, PredictionDict, Tokenizer


class LiveRecorder:
    """Draws the first batch's first sample step by step on ``console``; forwards to ``inner``."""

    def __init__(self, console: Console, tokenizer: Tokenizer, inner: HistoryRecorder | None = None) -> None:
        self.console = console
        self.tokenizer = tokenizer
        self.inner = inner
        self.k = inner.k if inner is not None else 1
        self._live: Live | None = None
        self._watching = False
        self._done = False
        self._probabilities: list[float] = []
        self._step_count = 0

    def _token(self, token_id: int) -> str:
        return token_display(self.tokenizer)(token_id)

    def begin(self, batch: Mapping[str, Any], canvas: Integer[Tensor, "batch seq_len"],
              output_start: Integer[Tensor, " batch"]) -> None:
        if self.inner is not None:
            self.inner.begin(batch, canvas, output_start)
        self._watching = not self._done
        if not self._watching:
            return
        start = int(output_start[0])
        prompt = [self._token(t) for t in batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()]
        self.console.print(Text(f"live: sample 0, prompt: {' '.join(prompt) or '(none)'}"))
        self.console.print(legend(plain=self.console.color_system is None))
        self._probabilities = [math.nan] * (canvas.shape[1] - start)
        self._step_count = 0
        if self.console.is_terminal:  # elsewhere each frame is printed in turn
            self._live = Live(Text(""), console=self.console, auto_refresh=False)
            self._live.start()

    def on_step(self, state: DenoisingStep) -> None:
        if self.inner is not None:
            self.inner.on_step(state)
        if not self._watching or not bool(state.active[0]):
            return
        valid = int(state.window_valid[0].sum())
        start = int(state.output_start[0])
        tokens = state.canvas[0, start:start + valid].tolist()
        committed = state.committed[0, :valid].tolist()
        top_ids = state.topk_ids[0, :valid].tolist()
        top_probs = state.topk_probs[0, :valid].tolist()
        for j in range(valid):
            if committed[j]:
                ids = top_ids[j]
                self._probabilities[j] = top_probs[j][ids.index(tokens[j])] if tokens[j] in ids else math.nan
        mask = self.tokenizer.mask_token_id
        masked = [token == mask for token in tokens]
        self._step_count += 1
        view = frame(f"step {state.step} (forward pass {self._step_count}), {sum(masked)} masked",
                     [self._token(t) for t in tokens], masked, committed, self._probabilities[:valid],
                     [self._token(ids[0]) for ids in top_ids], plain=self.console.color_system is None)
        if self._live is not None:
            self._live.update(view, refresh=True)
        else:
            self.console.print(view)

    def end(self, prediction: PredictionDict) -> None:
        if self.inner is not None:
            self.inner.end(prediction)
        if not self._watching:
            return
        if self._live is not None:
            self._live.stop()
            self._live = None
        self.console.print(Text(f"output: {output_text(prediction['text'][0])}"))
        self._watching, self._done = False, True
