"""``xdllm eval``: a checkpoint's loss metrics and generation metrics on a held-out split (or on
a ``.jsonl`` prompts_file's prompts and responses), written nowhere; on free text, the loss
metrics only (a generation there has nothing to be scored against), unless a ``judge`` scores
the generated texts. ``held_out_loss`` is also
the after-training step's loss on free text."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from xdllm.config.compose import ROOT_CONFIG_DIR
from xdllm.config.override_text import command, override
from xdllm.config.schema import check_values
from xdllm.data.datamodule import DiffusionData
from xdllm.data.named_collate import NamedCollate
from xdllm.errors import XdllmError
from xdllm.evaluate import MetricTotals
from xdllm.run.checkpoint import TrainedRun
from xdllm.run.choice_file import is_choice_file
from xdllm.run.choice_scores import choice_metrics, choice_records, scored_choices
from xdllm.run.device import autocast, batch_to
from xdllm.run.free_text import is_free_text
from xdllm.run.generate import checkpoint_fields, load_run, place_run, run_generation
from xdllm.run.generation_check import check_generation, generation_options, warn_of_untrained_settings
from xdllm.run.generation_record import show_value
from xdllm.run.prompt_sources import held_out_data

log = logging.getLogger(__name__)


def evaluate_from_config(config: DictConfig) -> dict[str, Any]:
    """``xdllm eval`` of a composed ``configs/generate.yaml``."""
    options = generation_options(config)
    _refuse_output_options(options)
    _check_choice_records(options)
    return _metrics(load_run(options), options)


def evaluate_run(run: TrainedRun | str | Path, *, split: str = "test", num_samples: int | None = None,
                 predictor: Mapping[str, Any] | None = None, device: str = "auto",
                 batch_size: int = 64, judge: str | Path | None = None, prompts_file: str | Path | None = None,
                 evaluator: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``xdllm eval`` from Python (a notebook, a script): the loss and generation metrics of
    ``run`` (a :class:`TrainedRun`, or a checkpoint file or run directory to load) on the first
    ``num_samples`` of a held-out ``split`` (or of a ``prompts_file``: a ``.jsonl`` of prompts and
    responses, or a multiple-choice one), with ``predictor`` merged over the run's predictor
    (``{"threshold": 0.9}`` as ``predictor.threshold=0.9``), ``evaluator`` over its evaluator
    (``{"num_levels": 64}``) and, with ``judge`` (an arlm run), the judge's scores of the
    generations (``judge=``); writes nothing."""
    return _metrics(*_python_options(
        run, {"split": split, "num_samples": num_samples, "device": device, "batch_size": batch_size,
              "predictor": dict(predictor or {}), "evaluator": dict(evaluator or {}),
              "judge": None if judge is None else str(judge),
              "prompts_file": None if prompts_file is None else str(Path(prompts_file).resolve())}))


def score_choices(run: TrainedRun | str | Path, prompts_file: str | Path, *, num_questions: int | None = None,
                  evaluator: Mapping[str, Any] | None = None, device: str = "auto",
                  batch_size: int = 64) -> list[dict[str, Any]]:
    """The per-question records behind ``xdllm eval``'s multiple-choice figures (which write
    nothing): for each of the first ``num_questions`` questions of ``prompts_file``, its
    choices' NLL and tokens, the choice picked and whether it is right
    (:func:`~xdllm.run.choice_scores.choice_records`); ``evaluator``: overrides, as
    ``evaluator.*`` (``{"num_levels": 64, "estimator": "count"}``)."""
    path = Path(prompts_file).resolve()
    if not is_choice_file(path):
        raise XdllmError(f"{path} is not a multiple-choice .jsonl file (its first line has no 'choices')")
    run, options = _python_options(run, {"prompts_file": str(path), "num_samples": num_questions, "device": device,
                                         "batch_size": batch_size, "evaluator": dict(evaluator or {})})
    return choice_records(scored_choices(*_with_evaluator_options(run, options)))


def _python_options(run: TrainedRun | str | Path, values: Mapping[str, Any]) -> tuple[TrainedRun, DictConfig]:
    """``configs/generate.yaml`` with ``values`` and ``ckpt`` (``run``'s checkpoint), checked as
    the command line's are, and the run (loaded where ``run`` names a checkpoint or run dir)."""
    options = OmegaConf.load(ROOT_CONFIG_DIR / "generate.yaml")
    checkpoint = run.checkpoint if isinstance(run, TrainedRun) else run
    options.merge_with({"ckpt": str(checkpoint), **values})
    check_values(options, "generate")
    options = generation_options(options)
    return (run if isinstance(run, TrainedRun) else load_run(options)), options


def _metrics(run: TrainedRun, options: DictConfig) -> dict[str, Any]:
    """:func:`_figures`, and the evaluator options given (which change them) where there are."""
    given = OmegaConf.to_container(options.evaluator, resolve=True)
    figures = _figures(*_with_evaluator_options(run, options))
    return {**figures, "evaluator": given} if given else figures


def _figures(run: TrainedRun, options: DictConfig) -> dict[str, Any]:
    """Loss (deterministic corruption) and generation metrics on a split; writes nothing. On
    free text, the loss metrics only: a generation there has nothing to be scored against."""
    if options.prompts_file:
        if is_choice_file(Path(options.prompts_file)):
            return choice_metrics(run, options)
        return _prompts_file_metrics(run, options)
    if is_free_text(run.components.task) and options.judge is None:
        return _evaluate_free_text(run, options)  # with a judge, generated texts are scored as answers are
    data = held_out_data(run, options)  # one draw of the split, for the loss and the generation
    generation = check_generation(run, OmegaConf.merge(options, {"history": None}), data)
    losses = held_out_loss(run, options, data)
    return {"split": options.split, **losses, **run_generation(run, generation, write_outputs=False)}


def _with_evaluator_options(run: TrainedRun, options: DictConfig) -> tuple[TrainedRun, DictConfig]:
    """The run with ``options.evaluator`` merged over its evaluator, and the options without them
    (the generation the options go on to, which refuses them, uses the run's evaluator)."""
    if not options.evaluator:
        return run, options
    evaluator = run.evaluator(**options.evaluator)
    warn_of_untrained_settings(run, "evaluator", options.evaluator)
    options = options.copy()
    options.evaluator = {}
    return replace(run, components=replace(run.components, evaluator=evaluator)), options


def _evaluate_free_text(run: TrainedRun, options: DictConfig) -> dict[str, Any]:
    if options.predictor:
        keys = ", ".join(f"predictor.{key}" for key in options.predictor)
        raise XdllmError(f"eval on free text reports the loss metrics and generates nothing (no reference to score "
                         f"a generated text against), so {keys} does not apply; give judge=<an arlm run with the "
                         f"same tokenizer> to score generated texts by their perplexity, or sample texts with "
                         f"{_sample_texts(options)}")
    losses = held_out_loss(run, options)
    log.info("free text: the loss metrics of the %s split; no generation (nothing to score it against; judge=<an "
             "arlm run> scores generated texts); %s samples texts", options.split, _sample_texts(options))
    return {**checkpoint_fields(run), "split": options.split, **losses}


def _sample_texts(options: DictConfig) -> str:
    return command("xdllm", "generate", override("ckpt", options.ckpt), "predictor.temperature=1.0")


OUTPUT_OPTIONS = ("output_dir", "history", "history_k", "history_tensorboard_samples", "live")
"""Options of what ``generate`` writes or draws; ``eval`` refuses them set to other than their default."""


def _refuse_output_options(options: DictConfig) -> None:
    defaults = OmegaConf.load(ROOT_CONFIG_DIR / "generate.yaml")
    for key in OUTPUT_OPTIONS:
        if options[key] != defaults[key]:
            raise XdllmError(f"eval writes nothing, so {key}={show_value(options[key])} does not apply to it; use "
                             f"{command('xdllm', 'generate', override('ckpt', options.ckpt))} ... for predictions, "
                             "history or the live view")


def _check_choice_records(options: DictConfig) -> None:
    """``choice_records=`` names a new file, for the records of a multiple-choice prompts_file."""
    records = options.get("choice_records")
    if not records:
        return
    prompts_file = options.prompts_file
    if prompts_file and not Path(prompts_file).is_file():
        raise XdllmError(f"prompts_file not found: {prompts_file}")
    if not prompts_file or not is_choice_file(Path(prompts_file)):
        scored = f"prompts_file={prompts_file} has no choices" if prompts_file else f"split={options.split} has none"
        raise XdllmError(f"choice_records={records} writes the records of a multiple-choice prompts_file's questions, "
                         f"and {scored}: give prompts_file=<a .jsonl of {{\"prompt\", \"choices\", \"answer\"}} "
                         "lines> (the predictions of other prompts are written by xdllm generate)")
    path = Path(records)
    if path.exists() or path.is_symlink():
        raise XdllmError(f"choice_records={records}: {path} exists and eval does not overwrite it; remove it or name "
                         "another file")
    parent = next((folder for folder in path.absolute().parents if folder.exists()), None)
    if parent is not None and not parent.is_dir():
        raise XdllmError(f"choice_records={records}: {parent} is a file, not a folder; name another file")


def held_out_loss(run: TrainedRun, options: DictConfig, data: DiffusionData | None = None) -> dict[str, float]:
    """The evaluator's loss metrics (deterministic corruption) on the ``options.split`` (drawn by
    ``data`` when given)."""
    if data is None:
        data = held_out_data(run, options)
    return _loss_metrics(run, options, data.held_out_dataloader(options.split, "loss"))


def _loss_metrics(run: TrainedRun, options: DictConfig, batches: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The evaluator's loss metrics over ``batches`` of the run's val collator."""
    totals = MetricTotals()
    loss_fn = run.loss_function()
    device, dtype = place_run(run, options.device)
    with torch.inference_mode(), autocast(device, dtype):
        for batch in batches:
            totals.add(run.components.evaluator.loss_metrics(run.model, batch_to(batch, device), loss_fn))
    return run.components.evaluator.finalize(totals.means())


def _prompts_file_metrics(run: TrainedRun, options: DictConfig) -> dict[str, Any]:
    """Loss and generation metrics on a ``.jsonl`` prompts_file's prompts and responses."""
    path = Path(options.prompts_file)
    generation = check_generation(run, OmegaConf.merge(options, {"history": None}))  # reads the prompts once
    prompts = generation.prompts
    if not prompts.scored:
        generate = command("xdllm", "generate", override("ckpt", options.ckpt), override("prompts_file", path))
        raise XdllmError(f"eval scores prompts against their responses, and {path} has prompts alone: give a .jsonl "
                         "prompts_file with {\"prompt\": ..., \"response\": ...} per line, or complete the prompts "
                         f"with {generate}")
    collate = NamedCollate(run.components.collators["val"], "collator.val")
    examples, size = prompts.examples, options.batch_size
    losses = _loss_metrics(run, options, (collate(examples[start:start + size])
                                          for start in range(0, len(examples), size)))
    return {"prompts_file": str(path), **losses, **run_generation(run, generation, write_outputs=False)}
