"""The drafter's frozen target: its shape (read from its checkpoint) and the features it gives.

The target is an ``arlm`` run (``frozen.target=<run dir or checkpoint>``). The drafter is built
before the frozen models are loaded, so its sizes come from the target checkpoint's config:
the drafter shares the target's width (it reads the target's token embedding and LM head),
and its context is the target's residual streams after a few evenly spread layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn

from xdllm.config.override_text import override, shell_word
from xdllm.errors import XdllmError
from xdllm.nn import CausalMask, KVCache, RotaryTransformer, TransformerOutput
from xdllm.run.run_checkpoint import CONFIG_KEY, resolve_checkpoint
from xdllm.train.checkpoint_io import read_checkpoint_file

TARGET_FAMILY = "arlm"


@dataclass(frozen=True)
class TargetShape:
    """What the drafter needs to know of its target before the target is loaded."""

    d_model: int
    n_layers: int
    vocab_size: int
    max_positions: int


def read_target_shape(target: str) -> TargetShape:
    """The sizes of the ``arlm`` model stored in ``target`` (a checkpoint file or run directory).

    Another family, or no checkpoint there, is an error that names the path and what to pass."""
    if not target:
        raise ValueError("the DFlash drafter needs a target: +frozen.target=<arlm run directory or checkpoint>")
    try:
        path = resolve_checkpoint(target)
    except XdllmError as error:
        raise ValueError(f"frozen.target={target}: {error}; the drafter drafts for a trained {TARGET_FAMILY} run: "
                         "train one first (experiment=sort_dflash_target or text_arlm, "
                         f"{shell_word(override('run_dir', target))}) or "
                         "point frozen.target= at one") from None
    config = read_checkpoint_file(path).get(CONFIG_KEY) or {}
    family = config.get("model_family")
    if family != TARGET_FAMILY:
        raise ValueError(f"frozen.target={target}: the DFlash drafter drafts for an {TARGET_FAMILY} model, "
                         f"{path} holds a {family!r} model")
    model = config["model"]
    return TargetShape(int(model["d_model"]), int(model["n_layers"]), int(model["vocab_size"]),
                       int(model["max_positions"]))


def evenly_spread_layers(n_layers: int, count: int) -> tuple[int, ...]:
    """``count`` block indices spread evenly from the first to the last of ``n_layers`` blocks
    (all of them when there are fewer; the last alone for one)."""
    if count < 1:
        raise ValueError(f"target_layers must be >= 1, got {count}")
    count = min(count, n_layers)
    if count == 1:
        return (n_layers - 1,)
    return tuple((i * (n_layers - 1) + (count - 1) // 2) // (count - 1) for i in range(count))


def require_target(frozen: dict[str, nn.Module] | None, where: str) -> RotaryTransformer:
    """The frozen model named ``target``, or an error saying how to give one."""
    target = (frozen or {}).get("target")
    if target is None:
        raise ValueError(f"{where}: no frozen target; train with frozen.target=<arlm run directory>")
    if not isinstance(target, RotaryTransformer):
        raise TypeError(f"{where}: frozen.target must be an arlm network (RotaryTransformer), "
                        f"got {type(target).__name__}")
    return target


def target_features(
    target: RotaryTransformer,
    layers: tuple[int, ...],
    input_ids: Integer[Tensor, "batch seq_len"],
    attention_mask: Bool[Tensor, "batch seq_len"],
    positions: Integer[Tensor, "batch seq_len"],
) -> Float[Tensor, "batch seq_len features"]:
    """The target's residual streams after ``layers``, concatenated (causal, no logits)."""
    with torch.no_grad():
        states = target.layer_states(input_ids, layers, attention_mask=attention_mask, positions=positions,
                                     mask_rule=CausalMask())
    return torch.cat(states, dim=-1)


def verify_pass(
    target: RotaryTransformer,
    layers: tuple[int, ...],
    input_ids: Integer[Tensor, "batch new"],
    positions: Integer[Tensor, "batch new"],
    cache: KVCache,
    attention_mask: Bool[Tensor, "batch new"] | None = None,
) -> tuple[Float[Tensor, "batch new vocab"], Float[Tensor, "batch new features"]]:
    """One cached causal pass of the target over new tokens: logits and concatenated features."""
    out = target(input_ids, attention_mask=attention_mask, positions=positions, mask_rule=CausalMask(),
                 kv_cache=cache, output_hidden_states=layers)
    assert isinstance(out, TransformerOutput)
    return out.logits, torch.cat(out.hidden_states, dim=-1)
