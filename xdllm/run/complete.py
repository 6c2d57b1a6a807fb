"""Complete prompts with a trained run from Python (a notebook, a script): what ``xdllm generate
prompts_file=...`` does, without files.

    import xdllm
    run = xdllm.load_trained("runs/quick")
    records = xdllm.complete(run, ["7 6 5 5 5 4 9 6"], predictor={"threshold": 0.9})
    records[0]["text"]           # '4 5 5 5 6 6 7 9'

Each record is a line of ``predictions.jsonl`` (``sample_index``: the prompt's index, ``prompt``,
``text``, ``ids``, ``steps_taken``, ``time_taken``; with ``responses``, the target fields too:
``target``, ``exact_match``, ...), as ``prompts_file=bench.jsonl`` scores its responses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from xdllm.errors import XdllmError
from xdllm.history import HistoryTopKPlugin
from xdllm.history.recorder import check_history_k
from xdllm.interfaces import Example
from xdllm.run.checkpoint import TrainedRun, load_trained
from xdllm.run.device import autocast, batch_to
from xdllm.run.generate import place_run, predict_batch
from xdllm.run.prompt_sources import (
    check_canvas_fits,
    check_responses_fit,
    prompt_batches,
    prompt_example,
    refuse_masks_to_continue,
    response_ids,
)


def complete(run: TrainedRun | str | Path, prompts: Iterable[str], *, predictor: Mapping[str, Any] | None = None,
             device: str = "auto", batch_size: int = 64, history_dir: str | Path | None = None,
             history_k: int = 5, responses: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Complete every prompt with the run's predictor, ``predictor`` merged over its config
    (``{"threshold": 0.9}`` as ``predictor.threshold=0.9`` on the command line). ``responses``:
    one per prompt, the expected completions: each record is scored against its own.

    ``run``: a :class:`TrainedRun` or a checkpoint file or run directory to load. ``device``:
    ``auto | cpu | cuda``; the run's model moves there (autocast as it trained on CUDA).
    ``history_dir``: record the top-``history_k`` denoising history there, one file per batch
    (read it with ``xdllm.history.iter_samples(history_dir)``, view it with ``xdllm history``).
    """
    prompts = _strings(prompts, "prompts")
    if not prompts:
        raise XdllmError("prompts is empty: give at least one prompt")
    if batch_size < 1:
        raise XdllmError(f"batch_size must be >= 1, got {batch_size}")
    if history_dir is not None and (history_k < 1 or Path(history_dir).is_file()):
        raise XdllmError(f"history_k must be >= 1, got {history_k}" if history_k < 1 else
                         f"history_dir {history_dir} is a file, not a folder")
    if not isinstance(run, TrainedRun):
        run = load_trained(run)
    if history_dir is not None:
        check_history_k(history_k, run.tokenizer, "history_k")
    # the run's own predictor, built once with it, unless options change it (building one was a
    # sixth of a one-prompt call on the CPU: 12.3 ms against 10.2)
    chosen = run.predictor(**predictor) if predictor else run.components.predictor
    places = [f"prompts[{index}]" for index in range(len(prompts))]
    examples = [prompt_example(run.tokenizer, text, index, place)
                for index, (text, place) in enumerate(zip(prompts, places))]
    if responses is not None:
        examples = _with_responses(run, examples, responses, chosen)
    refuse_masks_to_continue(run, chosen, examples, places, "predictor={'max_new_tokens': 0}")
    check_canvas_fits(run, chosen, 1 + max(len(example["prompt_ids"]) for example in examples))
    placed, dtype = place_run(run, device)
    recorder = None
    if history_dir is not None:
        recorder = HistoryTopKPlugin(k=history_k, output_dir=Path(history_dir), tokenizer=run.tokenizer,
                                     split="prompts")
    records: list[dict[str, Any]] = []
    with torch.inference_mode(), autocast(placed, dtype):
        for batch in prompt_batches(run, examples, batch_size, scored=responses is not None):
            batch = batch_to(batch, placed)
            prediction = predict_batch(run, chosen, batch, recorder)
            records.extend(run.components.evaluator.records(batch, prediction))
    return records


def _with_responses(run: TrainedRun, examples: list[Example], responses: Iterable[str], predictor: Any
                    ) -> list[Example]:
    """The examples with each response as the target they are scored against."""
    responses = _strings(responses, "responses")
    if len(responses) != len(examples):
        raise XdllmError(f"{len(responses)} responses for {len(examples)} prompts: give one response per prompt")
    places = [f"responses[{index}]" for index in range(len(responses))]
    scored = [{**example, "target_ids": response_ids(run.tokenizer, text, place)}
              for example, text, place in zip(examples, responses, places)]
    check_responses_fit(scored, places, predictor)
    return scored


def _strings(values: Iterable[object], name: str) -> list[str]:
    """``values`` (a list, a tuple, a generator, a pandas column) as a list of strings; a bare
    string (a sequence of characters) or an item that is not a string is refused by ``name``."""
    if isinstance(values, str):
        raise XdllmError(f"{name} is one string ({values[:40]!r}); give a list of {name}, e.g. [{values[:40]!r}]")
    values = list(values)
    for index, text in enumerate(values):
        if not isinstance(text, str):
            raise XdllmError(f"{name}[{index}] is {type(text).__name__} {text!r}, not a string")
    return values
