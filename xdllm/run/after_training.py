"""What ``xdllm train`` does with its best checkpoint once training ends (``generate_after_train``).

- A task with answers: generate on the test split with history, as ``xdllm generate
  ckpt=<checkpoint> split=test history=topk`` would (exact match, token accuracy, ...).
- Free text (:mod:`xdllm.run.free_text`): the test split's loss metrics, the NLL or its bound
  (also logged as ``test/<name>`` in the run's TensorBoard), and ``text_samples_after_train``
  generated samples to read (0: none), not a full split of long unconditional generations, drawn
  at ``text_samples_temperature`` (greedy decoding of empty prompts gives one text N times).
- With ``validation_choices``: the same checkpoint's scores on that multiple-choice file too
  (``"validation_choices": {"questions", "choice_accuracy", ...}``).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from xdllm.config.compose import compose_config
from xdllm.config.override_text import command, override
from xdllm.errors import XdllmError
from xdllm.run.checkpoint import load_trained
from xdllm.run.choice_scores import CHOICE_FIGURES
from xdllm.run.evaluate import evaluate_run, held_out_loss
from xdllm.run.generate import checkpoint_fields, generate, generate_from_config
from xdllm.run.generation_folder import resume_command
from xdllm.run.generation_record import write_scalars
from xdllm.run.partial_generation import PARTIAL_PREDICTIONS
from xdllm.run.run_log import RunLog
from xdllm.run.train import TrainResult

log = logging.getLogger(__name__)


def generate_after_training(checkpoint: Path, free_text: bool, text_samples: int,
                            text_temperature: float | None, judge: str | None = None) -> dict[str, Any]:
    """Run the after-training step on ``checkpoint``; return its summary. ``text_temperature``
    (free text): the samples' ``predictor.temperature``; None: the predictor's own. ``judge``:
    the run that scores the generations (``judge=``)."""
    overrides = [override("ckpt", checkpoint), "split=test", "history=topk"]
    if judge is not None:
        overrides.append(override("judge", judge))
    if not free_text:
        return generate_from_config(compose_config("generate", overrides))
    options = compose_config("generate", overrides)
    run = load_trained(options.ckpt)
    losses = held_out_loss(run, options)
    write_scalars(run.run_dir / "tensorboard", {f"test/{name}": value for name, value in losses.items()},
                  run.global_step)
    summary: dict[str, Any] = {**checkpoint_fields(run), "split": "test", **losses}
    if text_samples > 0:
        sampling = OmegaConf.merge(options, {"num_samples": text_samples})
        if text_temperature is not None:
            with open_dict(sampling):
                sampling.predictor.temperature = text_temperature
        samples = generate(run, sampling)
        say_first_samples(Path(samples["predictions"]))
        samples["text_samples"] = samples.pop("num_samples")  # not the loss's samples: the split's
        summary.update({key: value for key, value in samples.items() if key not in summary})
    return summary


SAMPLES_SAID = 2
SAMPLE_CHARACTERS = 200


def say_first_samples(predictions: Path) -> None:
    """The first :data:`SAMPLES_SAID` text samples, a line each (cut at :data:`SAMPLE_CHARACTERS`
    characters): something to read at once; the file holds them all."""
    with open(predictions, encoding="utf-8") as lines:
        for line, _ in zip(lines, range(SAMPLES_SAID)):
            record = json.loads(line)
            text = " ".join(record["text"].split())
            cut = f"... ({len(text)} characters)" if len(text) > SAMPLE_CHARACTERS else ""
            log.info("text sample %d: %s%s", record["sample_index"], text[:SAMPLE_CHARACTERS], cut)


def finish_logged(result: TrainResult, config: DictConfig, run_log: RunLog) -> dict[str, Any] | None:
    """:func:`finish_training` for a run that trained to its end, its result written to
    ``run_log``; a run stopped before its end (a signal, ``trainer.max_time``) gets its stop line
    there instead, and None."""
    if result.stopped_at_step is not None:
        run_log.note(result.stop_line)
        return None
    summary = finish_training(result, config)
    run_log.result(summary)
    return summary


def finish_training(result: TrainResult, config: DictConfig) -> dict[str, Any] | None:
    """The after-training step of a run that trained to its end, as ``config`` asks
    (``generate_after_train``); None where it asks none or no checkpoint was saved. A failure or
    a stop says that the checkpoints are whole and how to generate again (a stop that kept finished
    batches: how to continue that generation)."""
    checkpoint = result.best_checkpoint or result.last_checkpoint
    if not config.generate_after_train or checkpoint is None:
        return None
    again = command("xdllm", "generate", override("ckpt", result.run_dir))
    earlier = generation_folders(result.run_dir)
    try:
        summary: dict[str, Any] = {}
        if config.data.num_test_samples == 0:  # prepared data without a test split, say
            log.info("no generation after training: data.num_test_samples=0 keeps no test samples (generate on the "
                     "validation split with: %s split=validation)", again)
        else:
            summary = generate_after_training(checkpoint, result.free_text, config.text_samples_after_train,
                                              config.text_samples_temperature, config.get("judge"))
        if config.get("validation_choices"):
            scores = evaluate_run(checkpoint, prompts_file=config.validation_choices)
            summary["validation_choices"] = {key: scores[key] for key in ("questions", *CHOICE_FIGURES)}
        return summary or None
    except XdllmError as error:
        raise XdllmError(f"training finished (checkpoints in {checkpoint.parent}), but the generation after "
                         f"training failed: {error}. Generate again with {again} once that is fixed") from error
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM
        kept = [folder for folder in generation_folders(result.run_dir) - earlier
                if (folder / PARTIAL_PREDICTIONS).is_file()]  # the stopped generation kept finished batches
        what_next = f"continue it with: {resume_command(kept[0])}" if kept else f"generate again with: {again}"
        print(f"xdllm: training finished (checkpoints in {checkpoint.parent}); the generation after it was "
              f"stopped: {what_next}", file=sys.stderr)
        raise


def generation_folders(run_dir: Path) -> set[Path]:
    """The generation folders ``run_dir`` holds now."""
    return set((run_dir / "generate").glob("*"))
