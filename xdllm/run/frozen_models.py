"""The frozen models a run names (``frozen.<name>``: a checkpoint file or run directory): loaded
as networks alone, pointed elsewhere when they moved, and checked against the steps the run
trained with.

A frozen model is its network and weights: its run's task, data and tokenizer are not built, so
a target trained on a text file loads after that file moved (its data is the run's concern, and
the run's own ``data_path=`` says where the run's data is).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from xdllm.config.run_paths import frozen_checkpoint_keys
from xdllm.errors import XdllmError
from xdllm.run.build import instantiate_component
from xdllm.run.run_checkpoint import RunCheckpoint, read_run_checkpoint

log = logging.getLogger(__name__)


def frozen_network(checkpoint: RunCheckpoint, what: str) -> torch.nn.Module:
    """The network ``checkpoint`` holds, with its weights (their moving average where it has
    one), in eval mode without gradients; ``what`` names it in a build error."""
    model = instantiate_component(checkpoint.config.model, f"{what} ({checkpoint.path}) model")
    model.load_state_dict(checkpoint.model_weights())
    return model.eval().requires_grad_(False)


def load_frozen_models(config: DictConfig, map_location: str = "cpu"
                       ) -> tuple[dict[str, torch.nn.Module], dict[str, dict[str, object]]]:
    """The models named in ``config.frozen`` (name -> checkpoint file or run directory), with
    their weights' moving average where they have one, in eval mode without gradients, and where
    each came from (checkpoint path, step and family)."""
    models: dict[str, torch.nn.Module] = {}
    sources: dict[str, dict[str, object]] = {}
    for name, path in (config.get("frozen") or {}).items():
        if not path:
            raise XdllmError(f"frozen.{name} needs a checkpoint file or run directory")
        checkpoint = read_run_checkpoint(path, map_location)
        models[name] = frozen_network(checkpoint, f"frozen.{name}")
        sources[name] = {"checkpoint": str(checkpoint.path.resolve()), "global_step": checkpoint.global_step,
                         "model_family": checkpoint.config.get("model_family")}
    return models, sources


def relocate_frozen(config: DictConfig, name: str, place: str | Path) -> None:
    """Point the run's frozen model ``name`` at ``place``, and every component key that gave its
    old checkpoint straight (dflash's ``model.target``); refused for a name the run lacks."""
    named = dict(config.get("frozen") or {})
    if name not in named:
        raise XdllmError(f"frozen.{name}={place}: the run has no frozen model {name!r} (it has: "
                         f"{', '.join(named) or 'none'})")
    if not str(place).strip():
        raise XdllmError(f"frozen.{name}= is empty: give the run directory or checkpoint the frozen model is in now")
    new = str(Path(place).expanduser().resolve())
    for key in frozen_checkpoint_keys(config, name):
        if OmegaConf.select(config, key) == named[name]:
            OmegaConf.update(config, key, new)
    config.frozen[name] = new


def frozen_missing(config: DictConfig) -> list[str]:
    """The run's frozen models whose checkpoint file or run directory is not there."""
    return [name for name, place in (config.get("frozen") or {}).items()
            if isinstance(place, str) and not Path(place).exists()]


def warn_of_other_steps(loaded: Mapping[str, Mapping[str, Any]], recorded: Mapping[str, Mapping[str, Any]],
                        checkpoint: Path) -> None:
    """A line for each frozen model whose training step is not the one the run trained with (a
    target trained on, or another run given in its place): the run still works with it, but was
    trained against other weights (a drafter's drafts are then accepted less often)."""
    for name, source in loaded.items():
        trained_with = recorded.get(name, {}).get("global_step")
        if trained_with is not None and trained_with != source["global_step"]:
            log.warning("frozen.%s: %s holds training step %s, but %s was trained with step %s of %s: it runs, "
                        "against other weights than it trained with", name, source["checkpoint"],
                        source["global_step"], checkpoint, trained_with, recorded[name].get("checkpoint"))
