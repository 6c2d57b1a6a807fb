"""Whether weights trained by an earlier run were kept out of this run's held-out samples.

A task whose samples are drawn (every task but prepared data, whose splits were separated when it
was prepared) holds out the first ``data.num_val_samples`` / ``data.num_test_samples`` samples
its seed draws for validation and test, and its training stream skips them
(``docs/data.md``). Weights trained that way were kept out of exactly those samples: another
seed draws other held-out samples, and a larger count adds samples the training did not skip
(on the 3-digit addition task, 11 of the 512 test samples of seed 1 are among the 12,800 that
200 steps of seed 0 trained on). A resume that changes either is refused; a run started from
such weights (``init_from``) on the same task is warned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

HELD_OUT_COUNTS = (("num_val_samples", "validation"), ("num_test_samples", "test"))


def unkept_held_out(trained: Mapping[str, Any], config: DictConfig) -> list[str]:
    """How this run's held-out samples go past those the run that saved ``trained`` (its
    recorded config) kept out of its training: another seed, more samples of a split. Empty for
    another task (its samples are not the trained task's)."""
    if isinstance(trained, DictConfig):
        trained = OmegaConf.to_container(trained, resolve=True)
    task = OmegaConf.to_container(config.task, resolve=True)
    recorded = trained.get("task", {})
    if (recorded.get("name"), recorded.get("params")) != (task.get("name"), task.get("params")):
        return []
    changes = []
    if trained.get("seed") is not None and trained["seed"] != config.seed:
        changes.append(f"seed={config.seed} draws other validation and test samples than seed={trained['seed']}, "
                       "which it trained with")
    for key, split in HELD_OUT_COUNTS:
        kept, now = trained.get("data", {}).get(key), config.data[key]
        if kept is not None and now > kept:
            changes.append(f"data.{key}={now} holds out {split} samples {kept} to {now - 1}, past the {kept} it "
                           "kept out of training")
    return changes


def the_trained_values(trained: Mapping[str, Any]) -> str:
    """``seed=0, data.num_val_samples at most 256, data.num_test_samples at most 512``."""
    counts = [f"data.{key} at most {trained['data'][key]}" for key, _ in HELD_OUT_COUNTS
              if trained.get("data", {}).get(key) is not None]
    return ", ".join([f"seed={trained.get('seed')}", *counts])
