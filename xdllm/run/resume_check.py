"""Whether a checkpoint can continue the run this config builds: the same family, parameter
names and shapes, the same ``init_from``, a step not past ``trainer.max_steps``; what changed
since it was saved (a ``validation_choices`` file, the task's data) is said, and what the resumed
run validates differently is returned."""

from __future__ import annotations

import logging

import torch
from omegaconf import DictConfig

from xdllm.errors import XdllmError
from xdllm.run.checkpoint import ResumePoint
from xdllm.run.held_out_check import the_trained_values, unkept_held_out
from xdllm.run.initial_weights import shape_misfits
from xdllm.run.validation_change import measure_changes

log = logging.getLogger(__name__)

CHOICES_SHA256_KEY = "xdllm_validation_choices_sha256"
"""The checkpoint entry holding the SHA-256 of the run's ``validation_choices`` file."""
TASK_DATA_SHA256_KEY = "xdllm_task_data_sha256"
"""The checkpoint entry holding the digest of the task's data (a text file, a prepared dataset)."""


def check_resume_matches(point: ResumePoint, model: torch.nn.Module, config: DictConfig, resolved: dict,
                         choices_sha256: str | None = None, data_sha256: str | None = None,
                         held_out_drawn: bool = True) -> list[str]:
    """The checkpoint must hold this model: same family, same parameter names and shapes. A
    ``validation_choices`` file or task data that changed since the checkpoint (``choices_sha256``,
    ``data_sha256``: their digests now) is said: the figures from here on score other questions,
    the training stream reads other samples. Where the task's held-out samples are drawn
    (``held_out_drawn``: not prepared data), they must be ones the run kept out of training.

    Returns what the resumed run (``resolved``: its resolved config) validates differently from
    the run that saved the checkpoint (:func:`xdllm.run.validation_change.measure_changes`)."""
    checkpoint = torch.load(point.checkpoint, map_location="cpu", weights_only=False, mmap=True)
    other_choices = _changed(checkpoint, CHOICES_SHA256_KEY, choices_sha256)
    other_data = _changed(checkpoint, TASK_DATA_SHA256_KEY, data_sha256)
    if other_choices:
        recorded = checkpoint[CHOICES_SHA256_KEY]
        log.warning("validation_choices=%s has changed since %s was saved (sha256 %s..., now %s...): the "
                    "val/choice_* figures from step %d on score other questions than those before",
                    config.validation_choices, point.checkpoint, recorded[:12], choices_sha256[:12],
                    point.global_step)
    if other_data:
        recorded = checkpoint[TASK_DATA_SHA256_KEY]
        log.warning("the data of task %s (task.params.path=%s) has changed since %s was saved (sha256 %s..., now "
                    "%s...): from step %d on the run trains and validates on other samples than the run it "
                    "continues", config.task.name, config.task.params.get("path"), point.checkpoint, recorded[:12],
                    data_sha256[:12], point.global_step)
    family = checkpoint.get("xdllm_config", {}).get("model_family")
    if family != config.model_family:
        raise XdllmError(f"resume: {point.checkpoint} holds a {family} model, this run builds "
                         f"{config.model_family}")
    saved = {k.removeprefix("model."): v.shape for k, v in checkpoint["state_dict"].items()
             if k.startswith("model.")}
    misfits = shape_misfits(saved, {name: tensor.shape for name, tensor in model.state_dict().items()})
    if misfits:
        raise XdllmError(f"resume: {point.checkpoint} does not fit the model this config builds: {misfits[0]} "
                         "(resume with the model options the run was trained with)")
    started_from = checkpoint["xdllm_config"].get("init_from")
    if config.get("init_from") != started_from:
        raise XdllmError(f"resume: init_from={config.get('init_from')} but this run started from "
                         f"{started_from or 'its own initialisation'}: a resumed run continues from its checkpoint's "
                         "weights; to start from other weights, start a new run (without resume=)")
    trained = checkpoint["xdllm_config"]
    changes = unkept_held_out(trained, config) if held_out_drawn else []
    if changes:
        raise XdllmError(f"resume: {'; '.join(changes)} ({point.checkpoint}, step {point.global_step}): the run's "
                         "validation and test figures would count samples it may have trained on; resume with "
                         f"{the_trained_values(trained)}, or start a new run")
    check_steps_left(point, config.trainer.max_steps)
    return measure_changes(trained, resolved, other_data, other_choices)


def _changed(checkpoint: dict, key: str, now: str | None) -> bool:
    """The digest the checkpoint recorded under ``key`` differs from ``now`` (either unknown: no)."""
    return now is not None and checkpoint.get(key) not in (None, now)


def check_steps_left(point: ResumePoint, max_steps: int) -> None:
    """A checkpoint past ``trainer.max_steps`` is refused: that is the step a run ends at, not a
    number of steps more, so nothing would train. (One at it is allowed: what follows training
    runs, as when a sweep stopped in a finished run's generation.)"""
    if point.global_step > max_steps:
        raise XdllmError(f"resume: {point.checkpoint} is at step {point.global_step}, past trainer.max_steps="
                         f"{max_steps}, the step the run ends at (not a number of steps more): nothing would "
                         f"train; give trainer.max_steps above {point.global_step} to train on")

