"""Fakes for predictor tests: a letter tokenizer and models with hand-built distributions."""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

PAD, MASK, BOS, EOS = 0, 1, 2, 3
LETTERS = "abcdefghijklmnop"
VOCAB = 4 + len(LETTERS)


class LetterTokenizer:
    """ids 0-3 are pad/mask/bos/eos, then one id per letter."""

    pad_token_id, mask_token_id, bos_token_id, eos_token_id = PAD, MASK, BOS, EOS
    _special_names = {PAD: "<pad>", MASK: "<mask>", BOS: "<bos>", EOS: "<eos>"}

    @property
    def vocab_size(self) -> int:
        return VOCAB

    @property
    def special_token_ids(self) -> frozenset[int]:
        return frozenset(self._special_names)

    def encode(self, text: str) -> list[int]:
        return [4 + LETTERS.index(ch) for ch in text]

    def id_to_token(self, token_id: int) -> str:
        return self._special_names.get(token_id) or LETTERS[token_id - 4]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return "".join(self.id_to_token(i) for i in ids
                       if not (skip_special_tokens and i in self._special_names))


def letter(ch: str) -> int:
    return 4 + LETTERS.index(ch)


def logits_from_probs(dist: dict[int, float]) -> torch.Tensor:
    """A logit row giving exactly ``dist`` (unlisted ids get probability 0)."""
    row = torch.full((VOCAB,), float("-inf"))
    for token, p in dist.items():
        row[token] = math.log(p)
    return row


class PositionTableModel(nn.Module):
    """Logits depend only on a token's RoPE position: ``table[positions]``.

    Records every call's input rows so tests can count forward passes per row.
    """

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("table", table)
        self.calls: list[torch.Tensor] = []

    def forward(self, x_t, attention_mask=None, positions=None):
        self.calls.append(x_t.clone())
        return self.table[positions]


def position_table(rows: dict[int, dict[int, float]], length: int = 32) -> torch.Tensor:
    """A ``[length, VOCAB]`` table; positions not listed put all mass on letter 'p'."""
    default = logits_from_probs({letter("p"): 1.0})
    table = default.repeat(length, 1)
    for position, dist in rows.items():
        table[position] = logits_from_probs(dist)
    return table


class RecordingHistory:
    """A HistoryRecorder that keeps everything it is given (the top ``k`` tokens per step)."""

    def __init__(self, k: int = 3) -> None:
        self.k = k
        self.begun = None
        self.steps = []
        self.ended = None

    def begin(self, batch, canvas, output_start):
        self.begun = (canvas.clone(), output_start.clone())

    def on_step(self, state):
        self.steps.append(state)

    def end(self, prediction):
        self.ended = prediction

    def commit_order(self, row: int) -> list[list[int]]:
        """Canvas columns committed per step for one row (active steps only)."""
        return [(state.output_start[row] + state.committed[row].nonzero().flatten()).tolist()
                for state in self.steps if bool(state.active[row])]


def prompt_batch(prompts: list[list[int]], side: str = "left", **extra) -> dict:
    """``[bos] + prompt`` rows padded on ``side`` with a bool attention mask."""
    rows = [[BOS] + p for p in prompts]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        cols = slice(width - len(r), width) if side == "left" else slice(0, len(r))
        ids[i, cols] = torch.tensor(r)
        mask[i, cols] = True
    return {"input_ids": ids, "attention_mask": mask, **extra}


class BagOfTokensModel(nn.Module):
    """Logits of a position: ``table[position]`` plus the sum of ``embedding[token]`` over the
    row's real tokens (masks included), so a position's distribution changes as the canvas does,
    yet not with the row's padding, its place in the batch or its neighbours."""

    def __init__(self, seed: int = 0, length: int = 40, scale: float = 3.0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.register_buffer("table", torch.randn(length, VOCAB, generator=generator) * scale)
        self.register_buffer("embedding", torch.randn(VOCAB, VOCAB, generator=generator) * scale / 2)

    def forward(self, x_t, attention_mask=None, positions=None):
        bag = (self.embedding[x_t] * attention_mask[..., None]).sum(1, keepdim=True)
        return self.table[positions] + bag


class SecondThoughtsModel(nn.Module):
    """Output columns 2, 3, 4 after the prompt ``[bos, a]``. Alone, column 2 is surest ('a', 0.9);
    once column 2 is written, columns 3 and 4 become surer still (0.95, 0.92); and with 3 and 4
    written, column 2 is 'b' (0.99)."""

    def forward(self, x_t, attention_mask=None, positions=None):
        written = x_t != MASK
        rows = []
        for row in written:
            column_2 = ({letter("b"): 0.99, letter("a"): 0.01} if row[3] and row[4]
                        else {letter("a"): 0.9, letter("b"): 0.1})
            column_3 = {letter("c"): 0.95, letter("d"): 0.05} if row[2] else {letter("c"): 0.8, letter("d"): 0.2}
            column_4 = {letter("e"): 0.92, letter("f"): 0.08} if row[2] else {letter("e"): 0.5, letter("f"): 0.5}
            rows.append(torch.stack([logits_from_probs({letter("a"): 1.0})] * 2
                                    + [logits_from_probs(d) for d in (column_2, column_3, column_4)]))
        return torch.stack(rows)
