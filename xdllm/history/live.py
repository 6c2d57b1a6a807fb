"""One sample's denoising played in the terminal, step by step, coloured by confidence (rich).

Each frame is the output region after one step:

- a committed token is coloured by the probability it had at the step that committed it, on
  an absolute scale: red at 0, yellow at 0.5, green at 1 (grey if that is not known: a token
  outside the recorded top-k, or one given in the prompt);
- the tokens committed at this very step are bold and underlined;
- a still-masked position shows the model's current top-1 guess, dim and italic.

On a terminal the frames replace each other (``rich.live.Live``) every ``delay`` seconds; into
a file or a pipe they are printed one after another, one block per step, and without colour
masks show as ``_`` and the step's commits as ``*token*``.
"""

from __future__ import annotations

import math
import time

import torch
from jaxtyping import Float
from rich.color import Color
from rich.console import Console, Group
from rich.live import Live
from rich.style import Style
from rich.text import Text
from torch import Tensor

from xdllm.counted import counted
from xdllm.history.reader import SampleHistory
from xdllm.history.render import MASK_GLYPH, output_text, visible_token

UNKNOWN = Style(color="grey50")
GUESS = Style(color="grey39", dim=True, italic=True)
PROMPT = Style(color="grey70")


def commit_probabilities(sample: SampleHistory) -> Float[Tensor, "steps region"]:
    """After each step, the probability each position's token had at its latest commit so far;
    NaN where the position is still masked, was never committed (a given token) or its token
    is outside the recorded top-k of that step."""
    n_steps, region = sample.canvas.shape
    step_index = torch.arange(n_steps)[:, None].expand(n_steps, region)
    latest = torch.where(sample.committed, step_index, -1).cummax(0).values
    column = torch.arange(region)[None, :].expand(n_steps, region)
    ids = sample.topk_ids[latest.clamp(min=0), column]
    probs = sample.topk_probs[latest.clamp(min=0), column]
    match = ids == sample.canvas[..., None]
    probability = (probs * match).sum(-1)
    known = (latest >= 0) & match.any(-1) & ~sample.masked
    return torch.where(known, probability, torch.full_like(probability, math.nan))


def confidence_color(probability: float) -> Color:
    """Red (0) through yellow (0.5) to green (1), on an absolute scale."""
    p = min(max(probability, 0.0), 1.0)
    red, green = (255, round(510 * p)) if p < 0.5 else (round(510 * (1 - p)), 255)
    return Color.from_rgb(red, min(green, 255), 60)


def legend(plain: bool) -> Text:
    if plain:
        return Text(f"{MASK_GLYPH}: still masked   *token*: committed at this step")
    text = Text("confidence at commit ")
    for tenth in range(11):
        text.append("█", Style(color=confidence_color(tenth / 10)))
    text.append(" 0 → 1\n")
    text.append("bold underlined", Style(bold=True, underline=True))
    text.append(": committed at this step   ")
    text.append("grey italic", GUESS)
    text.append(": still masked, the model's top-1 guess")
    return text


def frame(title: str, tokens: list[str], masked: list[bool], committed_now: list[bool],
          probabilities: list[float], guesses: list[str], plain: bool = False) -> Text:
    """One step: ``title``, then each position's token (or, masked, its guess) styled as the
    module doc says; ``plain`` (no colour) shows masks as ``_`` and this step's commits as
    ``*token*``."""
    text = Text().append(title + "\n", Style(bold=True))
    for j, token in enumerate(tokens):
        if j:
            text.append(" ")
        if masked[j]:
            text.append(MASK_GLYPH if plain else visible_token(guesses[j]), GUESS)
            continue
        p = probabilities[j]
        style = UNKNOWN if math.isnan(p) else Style(color=confidence_color(p))
        shown = visible_token(token)
        if committed_now[j]:
            style += Style(bold=True, underline=True)
            shown = f"*{shown}*" if plain else shown
        text.append(shown, style)
    return text


def live_frames(sample: SampleHistory, plain: bool = False) -> list[Text]:
    """One frame per step of a recorded ``sample``."""
    probabilities = commit_probabilities(sample).tolist()
    canvas, masked = sample.canvas.tolist(), sample.masked.tolist()
    committed = sample.committed.tolist()
    guesses = sample.topk_ids[..., 0].tolist()
    remaining = sample.masks_remaining.tolist()
    return [frame(f"step {step} ({s + 1}/{sample.num_steps}), {remaining[s]} masked",
                  [sample.token(t) for t in canvas[s]], masked[s], committed[s], probabilities[s],
                  [sample.token(t) for t in guesses[s]], plain)
            for s, step in enumerate(sample.steps.tolist())]


def _header(sample: SampleHistory) -> Text:
    prompt = " ".join(visible_token(sample.token(t)) for t in sample.prompt_ids.tolist()) or "(none)"
    text = Text().append(f"sample {sample.sample_id}: {counted(sample.num_steps, 'step')}\n", Style(bold=True))
    text.append("prompt: ").append(prompt, PROMPT)
    return text


def play(sample: SampleHistory, console: Console, delay: float = 0.3) -> None:
    """Show ``sample``'s denoising on ``console``: animated on a terminal, else frame by frame."""
    plain = console.color_system is None
    frames = live_frames(sample, plain)
    console.print(_header(sample))
    console.print(legend(plain))
    if console.is_terminal and delay > 0:
        with Live(frames[0], console=console, auto_refresh=False) as live:
            for frame in frames[1:]:
                time.sleep(delay)
                live.update(frame, refresh=True)
    else:
        console.print(Group(*frames))
    if sample.text is not None:
        console.print(Text("output: ").append(output_text(sample.text)))
