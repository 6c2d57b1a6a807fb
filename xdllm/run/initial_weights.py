"""``init_from=<run directory or checkpoint>``: a new run starts from another run's weights.

The weights are the model's alone (its moving average where the checkpoint has one: the weights
that run validated and generated with); the optimizer, the schedule and the step start afresh.
Any family's weights load into any family's model they fit, name for name and shape for shape:
an MLM into MDLM, or an autoregressive model into a diffusion one (the same rotary
transformer, causal or not). The tokenizer must be the one the weights were trained with, since
embedding rows are that tokenizer's tokens: left at ``builtin``, ``tokenizer`` becomes the one
the checkpoint stores; another given is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf

from xdllm.config.override_text import override_value
from xdllm.config.run_paths import BUILTIN_TOKENIZER
from xdllm.data.tokenizer import load_tokenizer
from xdllm.errors import XdllmError
from xdllm.interfaces import Tokenizer
from xdllm.run.run_checkpoint import RunCheckpoint, read_run_checkpoint
from xdllm.run.stored_tokenizer import stored_tokenizer

log = logging.getLogger(__name__)

INIT_SOURCE_KEY = "xdllm_init_from"
"""The checkpoint entry saying which weights a run started from (checkpoint, step, family)."""


@dataclass(frozen=True)
class InitialWeights:
    """The checkpoint ``init_from`` names, read, and the tokenizer the new run must use."""

    source: RunCheckpoint
    tokenizer: Tokenizer | None
    """The tokenizer the checkpoint stores (None: the built-in one, or a file the config names)."""
    tokenizer_override: str | None = None
    """``tokenizer=<file>`` where ``tokenizer`` was left at ``builtin`` and became the checkpoint's
    (a resume of the new run composes it again)."""

    def record(self) -> dict[str, dict[str, object]]:
        """The checkpoint entry of the run started from these weights."""
        return {INIT_SOURCE_KEY: {"checkpoint": str(self.source.path.resolve()),
                                  "global_step": self.source.global_step,
                                  "model_family": self.source.config.get("model_family"),
                                  "moving_average": self.source.averaged}}

    def load_into(self, model: torch.nn.Module, config: DictConfig) -> str:
        """Copy the weights into ``model`` and say so in a line; refused, naming the first misfit
        and the model options that differ between the runs, when they do not fit it."""
        weights, renamed = aligned_names(self.source.model_weights(), set(model.state_dict()))
        misfits = shape_misfits({name: value.shape for name, value in weights.items()},
                                {name: value.shape for name, value in model.state_dict().items()})
        if misfits:
            more = f" (and {len(misfits) - 1} more)" if len(misfits) > 1 else ""
            raise XdllmError(f"init_from={self.source.path}: its weights do not fit the model this config builds: "
                             f"{misfits[0]}{more}{_option_differences(self.source.config, config)}")
        model.load_state_dict(weights)
        family = self.source.config.get("model_family")
        into = "" if family == config.get("model_family") else f", into this run's {config.get('model_family')} model"
        average = ", its moving average" if self.source.averaged else ""
        renaming = f" (names: {renamed})" if renamed else ""
        tokenizer = (f"; tokenizer: the one it trained with, {config.tokenizer} (its checkpoint stores it)"
                     if self.tokenizer_override else "")
        return (f"init_from: starting from the weights of {self.source.path} ({family} family, step "
                f"{self.source.global_step}{average}){into}{renaming}; optimizer and schedule start afresh"
                f"{tokenizer}{_layout_difference(self.source.config, config)}")


@contextmanager
def naming_the_tokenizer_taken(start: InitialWeights | None, config: DictConfig) -> Iterator[None]:
    """Errors raised inside say, where ``init_from`` chose the run's tokenizer, that it did: a task
    that tokenizer cannot encode is otherwise a puzzle (the command line never named it)."""
    try:
        yield
    except XdllmError as error:
        if start is None or start.tokenizer_override is None:
            raise
        raise XdllmError(f"{error} (the tokenizer is {config.tokenizer}, the one init_from={start.source.path} "
                         "trained with, as its weights need: start from a run whose tokenizer suits this task)"
                         ) from error


def aligned_names(weights: dict[str, torch.Tensor], built: set[str]) -> tuple[dict[str, torch.Tensor], str]:
    """``weights`` renamed to the built model's names where the two differ by one wrapping module
    alone (the MLM model holds the rotary transformer as ``transformer``, MDLM's model is that
    transformer), and how they were renamed (empty: as they were)."""
    if set(weights) == built:
        return weights, ""
    for prefix in {name.split(".", 1)[0] + "." for name in [*weights, *built] if "." in name}:
        if {name.removeprefix(prefix) for name in weights if name.startswith(prefix)} == built \
                and all(name.startswith(prefix) for name in weights):
            return {name.removeprefix(prefix): value for name, value in weights.items()}, f"{prefix}* there is * here"
        if {prefix + name for name in weights} == built:
            return {prefix + name: value for name, value in weights.items()}, f"* there is {prefix}* here"
    return weights, ""


def shape_misfits(saved: Mapping[str, torch.Size], built: Mapping[str, torch.Size]) -> list[str]:
    """Each parameter or buffer whose shape differs between saved weights and a built model,
    worded ``<name> is [shape] there and [shape] here`` (``missing`` where one lacks it)."""
    return [f"{name} is {_shape(saved.get(name))} there and {_shape(built.get(name))} here"
            for name in sorted(set(saved) | set(built)) if saved.get(name) != built.get(name)]


def _shape(shape: torch.Size | None) -> str:
    return "missing" if shape is None else str(list(shape))


def _predicts_next_token(config: DictConfig) -> bool:
    """Whether a run's network reads position ``j``'s logits from position ``j - 1`` (an ``arlm``,
    or a denoiser with ``model.shift_outputs=true``)."""
    return config.get("model_family") == "arlm" or bool(OmegaConf.select(config, "model.shift_outputs", default=False))


def _layout_difference(source: DictConfig, config: DictConfig) -> str:
    """A note when the source's outputs are laid out otherwise than this model's and this model
    offers ``model.shift_outputs`` to match them (empty otherwise)."""
    if "shift_outputs" not in config.model or _predicts_next_token(source) == _predicts_next_token(config):
        return ""
    if _predicts_next_token(source):
        return ("; note: its outputs at a position predict the next token, this model's the token there: "
                "model.shift_outputs=true keeps its layout")
    return ("; note: its outputs at a position predict the token there, this model's (model.shift_outputs=true) "
            "the next one: model.shift_outputs=false keeps its layout")


def _option_differences(source: DictConfig, config: DictConfig) -> str:
    """``; the model options differ: model.d_model=128 there, 256 here; ... give them as that run
    had them: model.d_model=128 ...`` (empty when the options are the same)."""
    there = OmegaConf.to_container(source.model, resolve=True)
    here = OmegaConf.to_container(config.model, resolve=True)
    keys = [key for key in dict.fromkeys([*there, *here]) if there.get(key) != here.get(key)]
    if not keys:
        return ""
    said = "; ".join(f"model.{key}={there.get(key)!r} there, {here.get(key)!r} here" for key in keys)
    given = " ".join(f"model.{key}={_as_override(there[key])}" for key in keys if key in there and key != "_target_")
    return f"; the model options differ: {said}" + (f"; give them as that run had them: {given}" if given else "")


def _as_override(value: object) -> str:
    """A model option's value as typed after ``key=``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return override_value(value) if isinstance(value, str) else str(value)


def initial_weights(config: DictConfig) -> InitialWeights | None:
    """The weights ``config.init_from`` names, with the tokenizer they need (None: not set).
    ``config.tokenizer`` left at ``builtin`` is set to the tokenizer file the checkpoint stores;
    a tokenizer given that is not the checkpoint's is refused."""
    path = config.get("init_from")
    if path is None:
        return None
    if not str(path).strip():
        raise XdllmError("init_from= is empty: give the run directory or checkpoint to start from (or leave it out)")
    try:
        source = read_run_checkpoint(path)
    except XdllmError as error:
        raise XdllmError(f"init_from: {error}") from error
    stored = stored_tokenizer(source.content, source.config, source.path)
    trained_with = str(source.config.get("tokenizer", BUILTIN_TOKENIZER))
    given = str(config.tokenizer)
    if stored is not None and given == BUILTIN_TOKENIZER:
        config.tokenizer = trained_with
        return InitialWeights(source, stored, f"tokenizer={override_value(trained_with)}")
    if stored is not None:
        if load_tokenizer(given).fingerprint != stored.fingerprint:
            raise XdllmError(f"tokenizer={given} is not the tokenizer init_from={source.path} trained with "
                             f"({trained_with}): its weights' embedding rows are that tokenizer's tokens; leave "
                             "tokenizer= out to train with that run's own (its checkpoint stores it)")
        return InitialWeights(source, stored)
    if trained_with == BUILTIN_TOKENIZER and given != BUILTIN_TOKENIZER:
        raise XdllmError(f"tokenizer={given}: init_from={source.path} trained with the built-in tokenizer, whose "
                         "tokens its weights' embedding rows are; leave tokenizer= out to train with it")
    return InitialWeights(source, None)
