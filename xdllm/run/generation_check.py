"""What ``xdllm generate`` / ``eval`` check before anything is drawn, written or generated.

``generation_options`` checks a composed ``configs/generate.yaml``; ``check_generation`` builds
the predictor with the generation's overrides, reads a ``prompts_file``, checks that the canvas
(and the judge's positions) fit, and returns a :class:`CheckedGeneration` ready to run (a sweep
checks every combination this way first, then runs what it checked).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xdllm.config.override_text import command, override
from xdllm.data.datamodule import DiffusionData
from xdllm.errors import XdllmError
from xdllm.evaluate.generative_perplexity import GenerativeJudge
from xdllm.history.recorder import check_history_k
from xdllm.run.checkpoint import TrainedRun
from xdllm.run.device import resolve_device
from xdllm.run.free_text import is_free_text
from xdllm.run.generation_record import show_value
from xdllm.run.judge_model import judge_for_generation
from xdllm.run.prompt_sources import (
    PromptsFile,
    check_canvas_fits,
    check_responses_fit,
    drawn_when_iterated,
    free_text_prompts,
    held_out_data,
    prompt_batches,
    read_prompts_file,
    refuse_masks_to_continue,
)

log = logging.getLogger(__name__)

HISTORY_CHOICES = (None, "topk")


def generation_options(config: DictConfig) -> DictConfig:
    """Check a composed ``configs/generate.yaml``."""
    if OmegaConf.is_missing(config, "ckpt") or not config.get("ckpt"):
        raise XdllmError("ckpt=<checkpoint file or run directory> is required")
    if config.history not in HISTORY_CHOICES:
        raise XdllmError(f"history must be one of {HISTORY_CHOICES}, got {config.history!r}")
    if config.batch_size < 1:
        raise XdllmError(f"batch_size must be >= 1, got {config.batch_size}")
    resolve_device(config.get("device", "auto"))  # a bad or unavailable device fails before loading
    return config


def _build_predictor(run: TrainedRun, options: DictConfig):
    """The run's predictor with ``options.predictor`` merged over it."""
    return run.predictor(**options.predictor)


@dataclass(frozen=True)
class CheckedGeneration:
    """A generation ``generate`` accepts: its options, its predictor and its prompt batches
    (held-out samples not drawn until it runs); for a ``prompts_file``, the prompts as read."""

    options: DictConfig
    predictor: Any
    batches: Iterator[Mapping[str, Any]]
    prompts: PromptsFile | None = None
    judge: GenerativeJudge | None = None

    @property
    def prompts_sha256(self) -> str | None:
        return None if self.prompts is None else self.prompts.sha256


def check_generation(run: TrainedRun, config: DictConfig, data: DiffusionData | None = None,
                     judges: dict[str, GenerativeJudge] | None = None) -> CheckedGeneration:
    """Refuse a composed ``configs/generate.yaml`` that ``generate`` would refuse (predictor
    options, canvas length, held-out samples, the judge), drawing, writing and generating
    nothing; else the generation, ready for :func:`run_generation` (a sweep checks every
    combination this way first, then runs what it checked). Held-out samples are drawn only when
    the batches are iterated, from ``data`` when given (``eval`` shares its loss's). ``judges``:
    judges loaded already, by path (a sweep's generations share one)."""
    options = generation_options(config)
    if options.get("evaluator"):
        key = next(iter(options.evaluator))
        raise XdllmError(f"evaluator.{key}={show_value(options.evaluator[key])}: evaluator options change the "
                         "likelihood figures of xdllm eval; generate computes none: "
                         f"{command('xdllm', 'eval', override('ckpt', options.ckpt))} evaluator.{key}=...")
    if options.get("choice_records"):
        raise XdllmError(f"choice_records={options.choice_records}: the records of a multiple-choice file's questions "
                         "are written by xdllm eval, which scores the choices (generate completes prompts): "
                         f"{command('xdllm', 'eval', override('ckpt', options.ckpt))} "
                         "prompts_file=<questions .jsonl> choice_records=...")
    predictor = _build_predictor(run, options)
    warn_of_untrained_settings(run, "predictor", options.predictor)
    if options.history:
        check_history_k(options.history_k, run.tokenizer, "history_k")
    warn_of_untrained_canvas(run, predictor)
    if options.prompts_file:
        prompts = read_prompts_file(run, Path(options.prompts_file), options.num_samples)
        refuse_masks_to_continue(run, predictor, prompts.examples, prompts.places, "predictor.max_new_tokens=0")
        if prompts.scored:
            check_responses_fit(prompts.examples, prompts.places, predictor)
        longest = 1 + max(len(example["prompt_ids"]) for example in prompts.examples)
        check_canvas_fits(run, predictor, longest)
        judge = _judge(run, options, predictor, longest, judges, prompts)
        return CheckedGeneration(options, predictor,
                                 prompt_batches(run, prompts.examples, options.batch_size, prompts.scored), prompts,
                                 judge)
    longest = 1 + run.components.task.max_prompt_len
    check_canvas_fits(run, predictor, longest)
    judge = _judge(run, options, predictor, longest, judges)
    if is_free_text(run.components.task):  # empty prompts: nothing of the split is read or scored
        return CheckedGeneration(options, predictor,
                                 prompt_batches(run, free_text_prompts(run, options), options.batch_size), judge=judge)
    check_targets_fit(run, predictor, options.split)
    if data is None:
        data = held_out_data(run, options)
    return CheckedGeneration(options, predictor, drawn_when_iterated(data, options.split), judge=judge)


def check_targets_fit(run: TrainedRun, predictor: Any, split: str) -> None:
    """Refuse a predictor that generates fewer tokens than the split's targets have with their
    EOS (``derived.max_new_tokens``): those would be scored wrong, however right the start (as
    a ``prompts_file`` response that does not fit is refused)."""
    new_tokens = getattr(predictor, "max_new_tokens", None)
    if new_tokens and new_tokens < run.max_new_tokens:
        raise XdllmError(f"the {split} split's targets are up to {run.max_new_tokens} tokens with their EOS (task "
                         f"{run.config.task.name}), more than the {new_tokens} the predictor generates "
                         f"(predictor.max_new_tokens={new_tokens}): those longer could not match; give "
                         f"predictor.max_new_tokens={run.max_new_tokens} or more, or leave it out (the run's own)")


_warned_canvases: set[tuple[str, int]] = set()  # (checkpoint, canvas) said in this process: once per sweep


def warn_of_untrained_canvas(run: TrainedRun, predictor: Any) -> None:
    """A line (once per checkpoint and canvas length in a process) when the predictor's canvas is
    longer than the EOS-filled responses the run trained on (``<family>.target_length``): the
    slots past them are positions the model never saw masked or filled, and a whole-canvas
    denoiser scatters EOS and text over them."""
    family = run.config.get("model_family")
    trained = OmegaConf.select(run.config, f"{family}.target_length") if family else None
    new_tokens = getattr(predictor, "max_new_tokens", None)
    said = (str(run.checkpoint), new_tokens)
    if trained is not None and new_tokens is not None and new_tokens > trained and said not in _warned_canvases:
        _warned_canvases.add(said)
        log.warning("the run trained on responses EOS-filled to %d slots (%s.target_length=%d), but the predictor "
                    "generates %d (predictor.max_new_tokens): the slots after the first %d are positions it never "
                    "trained on; predictor.max_new_tokens=%d generates on the canvas it learned", trained, family,
                    trained, new_tokens, trained, trained)


_warned_settings: set[tuple[str, str, str]] = set()  # (checkpoint, option, value) said in this process


def warn_of_untrained_settings(run: TrainedRun, component: str, overrides: Mapping[str, Any]) -> None:
    """A line (once per checkpoint and value in a process) for each override of a value the
    family shares between its training and its ``component`` (``<family>.block_size`` for the
    collator, the loss and the predictor, say) that differs from the one the run trained with:
    ``predictor.block_size=3`` on a run trained in blocks of 4 generates in blocks the model never
    saw (an experiment to know of: a 300-step ``sort_bd3lm`` run scored 0.03 exact match so,
    against 0.67 in its own blocks)."""
    family = run.config.get("model_family")
    shared = run.config.get(family) if family else None
    if not isinstance(shared, Mapping):
        return
    for key, value in overrides.items():
        said = (str(run.checkpoint), f"{component}.{key}", repr(value))
        if key in shared and shared[key] is not None and value != shared[key] and said not in _warned_settings:
            _warned_settings.add(said)
            log.warning("%s.%s=%s differs from %s.%s=%s, the value the run trained with: the model is used with a "
                        "setting it never trained on", component, key, show_value(value), family, key,
                        show_value(shared[key]))


def _judge(run: TrainedRun, options: DictConfig, predictor: Any, longest_prompt: int,
           judges: dict[str, GenerativeJudge] | None, prompts: PromptsFile | None = None) -> GenerativeJudge | None:
    """The generation's judge (None without one), refused for infilling prompts (masks)."""
    if options.get("judge") is None:
        return None
    mask = run.tokenizer.mask_token_id
    if prompts is not None and any(mask in example["prompt_ids"] for example in prompts.examples):
        raise XdllmError(f"judge={options.judge}: {options.prompts_file} has infilling prompts (with masks); the "
                         "judge scores text that continues its prompt, left to right")
    new_tokens = getattr(predictor, "max_new_tokens", None) or run.max_new_tokens
    return judge_for_generation(options.judge, run.tokenizer, predictor, longest_prompt, new_tokens, judges)
