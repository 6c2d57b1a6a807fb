"""`xdllm generate` / `xdllm eval`: run a trained model's predictor over prompts.

Prompts come from a split of the run's task or from a text file (one prompt per line).
What is checked before it runs: :mod:`xdllm.run.generation_check`.
Outputs go to one folder: ``predictions.jsonl`` (written atomically), and with
``history=topk`` the denoising history files and their TensorBoard views. A generation stopped
part-way keeps its finished batches' predictions in ``predictions.partial.jsonl``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console

from xdllm.config.compose import compose_config
from xdllm.config.override_text import override
from xdllm.config.schema import override_key
from xdllm.errors import XdllmError, os_error_text
from xdllm.evaluate.generative_perplexity import GenerativeJudge, finalize_with_judge
from xdllm.folder_names import GENERATE_CONFIG, RUN_CONFIG
from xdllm.history import HistoryTopKPlugin, write_tensorboard
from xdllm.history.live_recorder import LiveRecorder
from xdllm.history.storage import remove_files_from
from xdllm.history.tensorboard import remove_event_files
from xdllm.interfaces import Evaluator, HistoryRecorder, PredictionDict
from xdllm.predict.inputs import takes_frozen
from xdllm.run.checkpoint import TrainedRun, load_trained
from xdllm.run.device import autocast, autocast_dtype, batch_to, resolve_device
from xdllm.run.free_text import ONE_TEXT_WARNING, is_free_text, same_rows
from xdllm.run.generation_check import CheckedGeneration, check_generation, generation_options
from xdllm.run.generation_folder import (
    PREDICTIONS,
    SUMMARY,
    VIEWS_UNFINISHED,
    claim_output_dir,
    discard_unfinished,
    read_summary,
    resume_command,
    sweep_of,
)
from xdllm.run.generation_progress import GenerationProgress
from xdllm.run.generation_record import (
    generation_settings,
    read_record,
    resolved_options,
    settings_name,
    write_generation_config,
    write_generation_scalars,
)
from xdllm.run.partial_generation import (
    FinishedBatch,
    FinishedBatches,
    read_partial,
    remove_partial,
    write_partial,
)
from xdllm.run.run_checkpoint import resolve_checkpoint, run_dir_of
from xdllm.run.run_log import start_generation_log
from xdllm.temporary_files import remove_stale_temporaries, write_jsonl_atomically, write_text_atomically

log = logging.getLogger(__name__)


def load_run(options: DictConfig, checkpoint: str | Path | None = None) -> TrainedRun:
    """The checkpoint ``options.ckpt`` names (or ``checkpoint``), loaded with the generation's
    ``ema``, ``data_path`` and ``frozen`` (where the run's frozen models are now)."""
    return load_trained(checkpoint or options.ckpt, ema=options.ema, data_path=options.data_path,
                        frozen=dict(options.get("frozen") or {}))


def place_run(run: TrainedRun, requested_device: Any) -> tuple[torch.device, torch.dtype | None]:
    """Move the run's model (and frozen models) to the device ``auto | cpu | cuda`` names; return
    the device and the autocast dtype of the run's ``trainer.precision`` there."""
    device = resolve_device(requested_device)
    for model in (run.model, *run.frozen.values()):
        model.to(device)
    return device, autocast_dtype(run.config.trainer.get("precision"), device)


def generate(run: TrainedRun, options: DictConfig, write_outputs: bool = True,
             swept: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Generate for every prompt; write predictions (and history) unless ``write_outputs`` is
    False; return the summary. ``swept``: a sweep's values of options outside ``predictor``
    (``batch_size``, ``split``, ...), recorded with the predictor overrides as the settings."""
    return run_generation(run, check_generation(run, options), write_outputs, swept)


def run_generation(run: TrainedRun, checked: CheckedGeneration, write_outputs: bool = True,
                   swept: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`generate` of a generation checked already (once: its batches are used up)."""
    options = checked.options
    device, dtype = place_run(run, options.device)
    settings = {**generation_settings(options), **(swept or {})}
    if not write_outputs:
        return _generate_into(None, run, checked, device, dtype, settings)
    output_dir, made = claim_output_dir(run, options.output_dir, settings_name(settings))
    start_generation_log(output_dir)
    try:
        return _generate_into(output_dir, run, checked, device, dtype, settings)
    except BaseException:
        discard_unfinished(output_dir, made)
        raise


def predict_batch(run: TrainedRun, predictor: Any, batch: Mapping[str, Any],
                  recorder: HistoryRecorder | None) -> PredictionDict:
    """``predictor.predict`` of one batch with the run's model (and its frozen models, for a
    predictor that takes them); a ``ValueError`` (an option that does not fit the prompts) is
    refused in one line naming the predictor."""
    extras = {"frozen": run.frozen} if takes_frozen(predictor) else {}
    try:
        return predictor.predict(batch, model=run.model, history=recorder, **extras)
    except ValueError as error:
        raise XdllmError(f"{type(predictor).__name__}: {error}") from error


def _generate_into(output_dir: Path | None, run: TrainedRun, checked: CheckedGeneration, device: torch.device,
                   dtype: torch.dtype | None, settings: dict[str, Any],
                   resumed: FinishedBatches | None = None) -> dict[str, Any]:
    """Run the predictor over the batches; write the generation's files into ``output_dir``
    (nothing when it is None); return the summary. ``resumed``: the batches a stopped generation
    into ``output_dir`` finished, skipped here and counted in."""
    options, predictor = checked.options, checked.predictor
    write_outputs = output_dir is not None
    if write_outputs and resumed is None:
        write_generation_config(output_dir, options, run.config, run.checkpoint, run.global_step,
                                checked.prompts_sha256)
    history = None
    if options.history == "topk" and write_outputs:  # one recorder: one file per batch
        history = HistoryTopKPlugin(k=options.history_k, output_dir=output_dir / "history",
                                    tokenizer=run.tokenizer,
                                    split="prompts" if options.prompts_file else options.split)
    recorder = history
    if options.get("live"):  # the first sample drawn as it denoises, on stderr
        recorder = LiveRecorder(Console(stderr=True), run.tokenizer, inner=history)
    evaluator, judge = run.components.evaluator, checked.judge
    if judge is not None:
        judge.model.to(device)
    # unprompted: whether every output so far is the first one (one text written N times)
    done = resumed or FinishedBatches(one_text=is_free_text(run.components.task) and not options.prompts_file)
    finished: list[FinishedBatch] = []  # this run's batches, each appended whole
    skipped, started = done.batches, time.perf_counter()
    judging = 0.0  # seconds the judge took: not generation time
    progress = None if options.get("live") else GenerationProgress(earlier_seconds=done.seconds)  # live owns stderr
    samples, tokens = len(done.records), done.generated_tokens  # for the progress lines alone
    whole = None  # ``done`` and this run's batches, once all are generated
    try:
        with torch.inference_mode(), autocast(device, dtype):
            for batches_drawn, batch in enumerate(checked.batches, start=1):
                if batches_drawn <= skipped:  # finished before the generation was stopped
                    continue
                batch = batch_to(batch, device)
                prediction = predict_batch(run, predictor, batch, recorder)
                records, sums = evaluator.records(batch, prediction), evaluator.prediction_metrics(batch, prediction)
                if judge is not None:
                    judge_started = time.perf_counter()
                    judged = judge.score(batch, prediction)  # ends in a copy to the host: timed whole
                    judging += time.perf_counter() - judge_started
                    judged.add_to(records)
                    sums = {**sums, **judged.sums(device)}
                result = FinishedBatch(records, sums,
                                       int((prediction["ids"].shape[1] - prediction["output_start_idx"]).sum()))
                if done.one_text:  # for a warning alone
                    done.first_output = prediction["ids"][0] if done.first_output is None else done.first_output
                    done.one_text = same_rows(prediction["ids"], done.first_output)
                finished.append(result)
                samples, tokens = samples + len(result.records), tokens + result.generated_tokens
                if progress is not None:
                    progress.batch_done(samples, skipped + len(finished), tokens)
        whole = done.plus(finished, time.perf_counter() - started - judging)
        if whole.one_text and len(whole.records) > 1:
            log.warning(ONE_TEXT_WARNING, len(whole.records))
        summary = _summary(run, device, whole, evaluator, judge, output_dir, history is not None)
        if output_dir is None:
            return summary
        # the summary first: until the predictions are whole, a stop keeps the batches to continue from
        write_text_atomically(output_dir / SUMMARY, json.dumps(summary, indent=2) + "\n")
        write_jsonl_atomically(output_dir / PREDICTIONS, whole.records)
    except BaseException:  # Ctrl-C, SIGTERM, an error: what the finished batches made is kept
        if output_dir is not None and not (output_dir / PREDICTIONS).exists():
            (output_dir / SUMMARY).unlink(missing_ok=True)  # the results of predictions never written
            _keep_finished(output_dir, whole or done.plus(finished, time.perf_counter() - started - judging), history,
                           len(finished))
        raise
    remove_partial(output_dir)
    _write_tensorboard(output_dir, summary, run, settings, history is not None, options.history_tensorboard_samples)
    return summary


def _write_tensorboard(output_dir: Path, summary: dict[str, Any], run: TrainedRun, settings: dict[str, Any],
                       views: bool, view_samples: int | None) -> None:
    """A finished generation's results as scalars, then (``views``) the views of its history;
    when either fails, a line says that the predictions are whole, and how to write the views."""
    try:  # the scalars before the views, which a stop may cut short
        write_generation_scalars(output_dir / "tensorboard", summary, run.global_step, settings)
    except BaseException:
        log.warning("the predictions are in %s, but their TensorBoard scalars were not written", summary["predictions"])
        raise
    if views:
        write_views(output_dir, run, view_samples, summary["predictions"])


def write_views(output_dir: Path, run: TrainedRun, view_samples: int | None, predictions: str) -> None:
    """The TensorBoard views of a finished generation's history, replacing those a stop cut short;
    when they fail, a line says that the ``predictions`` are whole, and how to write the views.
    Until they are whole, ``views.unfinished`` tells ``resume=`` to draw them again."""
    logdir = output_dir / "tensorboard"
    try:
        (output_dir / VIEWS_UNFINISHED).touch()
        remove_event_files(logdir)
        write_tensorboard([output_dir / "history"], logdir, max_samples=view_samples, tokenizer=run.tokenizer,
                          grid=getattr(run.components.task, "grid_shape", None))
    except BaseException:  # resume= draws them again in place of the cut ones
        log.warning("the predictions are in %s, but the TensorBoard views of their history were not finished; "
                    "draw them with: %s", predictions, resume_command(sweep_of(output_dir) or output_dir))
        raise
    (output_dir / VIEWS_UNFINISHED).unlink()


def _summary(run: TrainedRun, device: torch.device, whole: FinishedBatches, evaluator: Evaluator,
             judge: GenerativeJudge | None, output_dir: Path | None, recorded_history: bool) -> dict[str, Any]:
    """What the generation prints (and keeps in ``summary.json``); with a judge, its checkpoint
    and its scores of the outputs."""
    records = whole.records
    summary: dict[str, Any] = {
        **checkpoint_fields(run),
        "device": str(device),
        "num_samples": len(records),
        "mean_steps": sum(r["steps_taken"] for r in records) / max(1, len(records)),
        "tokens_per_second": whole.generated_tokens / max(whole.seconds, 1e-9),
    }
    if output_dir is not None:
        summary["predictions"] = str(output_dir / PREDICTIONS)
    summary.update(finalize_with_judge(evaluator, whole.totals.means()))
    if judge is not None:
        summary["judge"] = str(judge.checkpoint.resolve())
    if recorded_history:
        summary["history"] = str(output_dir / "history")
    if output_dir is not None:
        summary["tensorboard"] = str(output_dir / "tensorboard")
    return summary


def _keep_finished(output_dir: Path, done: FinishedBatches, history: HistoryTopKPlugin | None,
                   finished_here: int) -> None:
    """A generation stopped part-way: the finished batches' predictions and totals go to
    ``predictions.partial.jsonl`` and ``generation.partial.json``; a history file of the batch
    under way (written before its predictions were kept) is removed; a line on stderr says where
    things are and how to continue."""
    if history is not None:  # by number: a stop between writing a file and listing it still finds it
        remove_files_from(history.output_dir, history.first_index + finished_here)
    if not done.records:
        return
    try:
        path = write_partial(output_dir, done)
    except OSError as error:  # a full disk, say: the error that stopped the generation is the one raised
        log.warning("the %d finished samples could not be kept either (%s)", len(done.records), os_error_text(error))
        return
    recorded = f"; their denoising history is in {history.output_dir}" if history is not None else ""
    # a sweep's generation is continued with its sweep, which says how
    how = "" if sweep_of(output_dir) else f"; continue it with: {resume_command(output_dir)}"
    log.warning("generation stopped after %d samples: their predictions are in %s%s%s", len(done.records), path,
                recorded, how)


RESUME_OPTIONS = ("device", "live", "data_path", "frozen")
"""What a continued generation may set anew: where it runs and draws, and where the run's data and
frozen models are now; not what it generates. Where they are is kept from its start unless given
anew; where it runs and draws is chosen anew."""
CHOSEN_ANEW = ("device", "live")


def continue_generation(folder: Path, overrides: Sequence[str] = (), run: TrainedRun | None = None,
                        swept: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``xdllm generate resume=<folder>``: finish the generation stopped in ``folder`` with the
    options it started with (its ``generate.yaml``) and the checkpoint file it read, at the same
    training step; ``overrides`` may set only :data:`RESUME_OPTIONS`. ``run``: that checkpoint,
    when a sweep has loaded it; ``swept``: the sweep's values outside ``predictor`` (as
    :func:`generate` takes them). Returns the whole generation's summary, as if it had never
    stopped."""
    finished = (folder / PREDICTIONS).exists()
    views_cut = finished and (folder / VIEWS_UNFINISHED).is_file()  # stopped while its views were drawn
    if finished and not views_cut:
        raise XdllmError(f"{folder} holds a finished generation ({PREDICTIONS}): there is nothing to continue")
    if not (folder / GENERATE_CONFIG).is_file():
        raise XdllmError(f"{folder} is not a generation folder (no {GENERATE_CONFIG}); resume= takes the folder "
                         "a stopped xdllm generate named")
    record = read_record(folder / GENERATE_CONFIG, ("checkpoint", "global_step", "predictor_overrides"))
    options = compose_config("generate", [override("ckpt", record.checkpoint), *overrides])
    given = {override_key(text).split(".")[0] for text in overrides}
    with open_dict(options):
        for key in options:
            if key not in ("ckpt", "predictor", *CHOSEN_ANEW, *given) and key in record:
                options[key] = record[key]
        options.predictor = record.predictor_overrides
        options.output_dir = str(folder)
    options = generation_options(options)
    run = run or load_run(options)
    if run.global_step != record.global_step:
        raise XdllmError(f"{run.checkpoint} now holds training step {run.global_step}, but the generation in {folder} "
                         f"started from step {record.global_step}: the rest would come from other weights; start "
                         "a new generation")
    start_generation_log(folder)
    if views_cut:
        log.info("drawing the TensorBoard views of %s again: the stop cut them short", folder)
        summary = read_summary(folder)
        write_views(folder, run, options.history_tensorboard_samples, summary["predictions"])
        return summary
    checked = check_generation(run, options)
    recorded_prompts = record.get("prompts_sha256")
    if recorded_prompts is not None and checked.prompts_sha256 != recorded_prompts:
        raise XdllmError(f"prompts_file {options.prompts_file} has changed since the generation in {folder} started "
                         f"(sha256 {recorded_prompts[:12]}..., now {checked.prompts_sha256[:12]}...): the rest "
                         "would answer other prompts; put the file back as it was, or start a new generation")
    device, dtype = place_run(run, options.device)
    for written in (folder, folder / "history"):  # what a write killed outright left
        remove_stale_temporaries(written)
    finished = read_partial(folder, device)
    log.info("continuing the generation in %s after its %d finished samples", folder, len(finished.records))
    return _generate_into(folder, run, checked, device, dtype, {**generation_settings(options), **(swept or {})},
                          resumed=finished)


def checkpoint_fields(run: TrainedRun) -> dict[str, Any]:
    """Which weights a summary's figures come from: the checkpoint, and for a run trained with
    ``optim.ema_decay`` whether its averaged weights (``ema``) or its trained ones."""
    return {"checkpoint": str(run.checkpoint.resolve()), **({} if run.ema is None else {"ema": run.ema})}


def generate_from_config(config: DictConfig, run: TrainedRun | None = None,
                         swept: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Generate as a composed ``configs/generate.yaml`` says, with ``run`` if it is loaded already."""
    options = generation_options(config)
    run = run or load_run(options)
    return generate(run, options, swept=swept)


def config_to_print(config: DictConfig) -> DictConfig:
    """What ``--cfg`` prints: the composed options with ``predictor`` resolved as ``generate.yaml``
    records it, from the run's ``config.yaml`` (no weights are loaded); the composed options as
    they are when ``ckpt`` is not given or its run has no readable ``config.yaml``."""
    if OmegaConf.is_missing(config, "ckpt") or not config.ckpt:
        return config
    try:
        run_config = OmegaConf.load(run_dir_of(resolve_checkpoint(config.ckpt)) / RUN_CONFIG)
        return OmegaConf.create(resolved_options(config, run_config))
    except (XdllmError, OSError, yaml.YAMLError, OmegaConfBaseException):
        return config
