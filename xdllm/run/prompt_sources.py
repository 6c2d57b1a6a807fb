"""Where a generation's prompts come from: a text file of prompts (one per line, tokenized with
the run's tokenizer) or a held-out split of the run's task (only the samples that were kept out
of training), and the check that the longest prompt and the new tokens fit the model."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from xdllm.data.absent_data import AbsentDataTask
from xdllm.data.datamodule import DiffusionData
from xdllm.data.named_collate import NamedCollate
from xdllm.data.prepared_task import PreparedTask
from xdllm.data.utf8_text import NotUTF8Text, decode_utf8
from xdllm.errors import XdllmError
from xdllm.interfaces import Example, Tokenizer
from xdllm.run.build import build_datamodule, position_overflow
from xdllm.run.checkpoint import TrainedRun

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptsFile:
    """The prompts of a ``prompts_file`` and the SHA-256 of the bytes they were read from (a
    stopped generation's ``generate.yaml`` records it, so that ``resume=`` can tell whether the
    file still holds the same prompts)."""

    examples: list[Example]
    sha256: str
    places: list[str]
    """Where each prompt is: ``<file>:<line>``."""
    scored: bool = False
    """Whether the prompts come with responses to score against (``target_ids``)."""


def prompt_example(tokenizer: Tokenizer, text: str, sample_index: int, where: str) -> Example:
    """``text`` tokenized with the run's tokenizer as a prompt to complete; a text the tokenizer
    cannot encode, or encodes in part as its unknown token (a word-level vocabulary), is refused
    naming ``where`` it came from."""
    try:
        prompt_ids = tokenizer.encode(text)
    except ValueError as error:
        raise XdllmError(f"{where}: {error}") from error
    unknown = getattr(tokenizer, "unk_token_id", None)
    if unknown is not None and unknown in prompt_ids:
        raise XdllmError(f"{where}: {_unknown_words(tokenizer, text, unknown)}")
    return Example(prompt_ids=prompt_ids, target_ids=[], sample_index=sample_index, step=0)


def _unknown_words(tokenizer: Any, text: str, unknown: int) -> str:
    """What of ``text`` the tokenizer's vocabulary lacks, and whether lower case would do."""
    pieces = list(dict.fromkeys(getattr(tokenizer, "unknown_pieces", lambda _: [])(text)))
    unknown_text = tokenizer.decode([unknown], skip_special_tokens=False)
    said = ", ".join(repr(piece) for piece in pieces) if pieces else "part of the prompt"
    one = len(pieces) == 1
    lower = f" (in lower case {'it is' if one else 'they are'} known)" if (
        text.lower() != text and unknown not in tokenizer.encode(text.lower())) else ""
    return (f"{said} {'is' if one else 'are'} not in the tokenizer's vocabulary of "
            f"{tokenizer.vocab_size} tokens{lower}: the model would see its unknown token {unknown_text} instead")


PROMPT_FIELD, RESPONSE_FIELD, CHOICES_FIELD = "prompt", "response", "choices"


def text_file_lines(path: Path, what: str) -> tuple[list[str], str]:
    """The lines of a UTF-8 file (a byte-order mark before the first line, as Windows editors
    write, is not part of it) and the SHA-256 of its bytes; a missing file or other bytes are
    refused naming ``what`` it is."""
    if path.is_dir():
        raise XdllmError(f"{what} {path} is a folder: give the file itself")
    if not path.is_file():
        raise XdllmError(f"{what} not found: {path}")
    content = path.read_bytes()
    try:
        return decode_utf8(content, path).splitlines(), hashlib.sha256(content).hexdigest()
    except NotUTF8Text as error:
        raise XdllmError(f"{what} {error}") from None


def refuse_more_than_held(asked: int | None, held: int, item: str, path: Path) -> None:
    """Refuse ``num_samples`` above the ``held`` items (``prompt``, ``question``) of prompts_file ``path``."""
    if asked is not None and held < asked:
        raise XdllmError(f"num_samples={asked} is more than the {held} {item}s of prompts_file {path}: give "
                         f"num_samples={held} or less, or leave it out (every {item})")


def read_prompts_file(run: TrainedRun, path: Path, num_prompts: int | None = None) -> PromptsFile:
    """One example per non-empty line of a UTF-8 file (its first ``num_prompts``; None: all; a
    file holding fewer is refused), tokenized with the run's tokenizer: the line itself, or in a
    ``.jsonl`` file a JSON object's ``prompt`` and, where every line has one, the ``response``
    the generation is scored against (exact match, as a held-out split)."""
    lines, sha256 = text_file_lines(path, "prompts_file")
    examples: list[Example] = []
    places: list[str] = []
    responded: list[bool] = []
    blank = 0
    for number, line in enumerate(lines, start=1):
        if num_prompts is not None and len(examples) == num_prompts:
            break
        if not line.strip():
            blank += 1
            continue
        places.append(f"{path}:{number}")
        prompt, response = _prompt_and_response(line, places[-1]) if path.suffix == ".jsonl" else (line.strip(), None)
        example = prompt_example(run.tokenizer, prompt, len(examples), places[-1])
        if response is not None:
            example = {**example, "target_ids": response_ids(run.tokenizer, response, places[-1])}
        examples.append(example)
        responded.append(response is not None)
    if not examples:
        raise XdllmError(f"prompts_file {path} holds no prompts")
    refuse_more_than_held(num_prompts, len(examples), "prompt", path)
    if any(responded) and not all(responded):  # scored as a whole or not at all
        raise XdllmError(f"{places[responded.index(False)]}: no {RESPONSE_FIELD!r}, where "
                         f"{places[responded.index(True)]} has one: give every prompt its response (to score the "
                         "generation) or none")
    if blank:  # sample_index counts prompts, not lines
        log.info("prompts_file %s: %d prompts; %d blank %s skipped", path, len(examples), blank,
                 "line" if blank == 1 else "lines")
    return PromptsFile(examples, sha256, places, all(responded))


def _prompt_and_response(line: str, where: str) -> tuple[str, str | None]:
    """A JSONL line's prompt and response (None: the line has none)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise XdllmError(f"{where}: not valid JSON ({error.msg} at column {error.colno}); a .jsonl prompts_file "
                         f"holds a JSON object per line ({{\"{PROMPT_FIELD}\": ...}}), a file of another name a "
                         "plain prompt per line") from error
    if not isinstance(record, dict) or not isinstance(record.get(PROMPT_FIELD), str):
        raise XdllmError(f"{where}: a .jsonl prompts_file holds one JSON object per line with a string "
                         f"{PROMPT_FIELD!r} (and a string {RESPONSE_FIELD!r} to score against), got "
                         f"{line.strip()[:80]}")
    if CHOICES_FIELD in record:
        raise XdllmError(f"{where}: a multiple-choice line ({CHOICES_FIELD!r}); xdllm eval scores such a file's "
                         "choices by the model's likelihood (its first line must have them too), generate completes "
                         "prompts")
    response = record.get(RESPONSE_FIELD)
    if response is not None and not isinstance(response, str):
        raise XdllmError(f"{where}: {RESPONSE_FIELD!r} must be a string, got {json.dumps(response)[:40]}")
    return record[PROMPT_FIELD], response


def response_ids(tokenizer: Tokenizer, response: str, where: str) -> list[int]:
    try:
        return tokenizer.encode(response)
    except ValueError as error:
        raise XdllmError(f"{where}: the response: {error}") from error


def check_responses_fit(examples: list[Example], places: list[str], predictor: Any) -> None:
    """Refuse responses (``target_ids``) the predictor cannot generate whole: longer, with their
    EOS, than the tokens it adds (every one would be scored wrong)."""
    new_tokens = getattr(predictor, "max_new_tokens", None)
    if not new_tokens:
        return
    lengths = [len(example["target_ids"]) + 1 for example in examples]
    longest = max(lengths)
    if longest > new_tokens:
        raise XdllmError(f"{places[lengths.index(longest)]}: the response is {longest} tokens with its EOS, more than "
                         f"the {new_tokens} the predictor generates (predictor.max_new_tokens={new_tokens}): give "
                         f"predictor.max_new_tokens={longest} or more")


def prompt_batches(run: TrainedRun, examples: list[Example], batch_size: int,
                   scored: bool = False) -> Iterator[Mapping[str, Any]]:
    """The prompts in batches of the run's prediction collator, with the responses to score
    against (``target_ids``) where they are ``scored``."""
    collate = NamedCollate(run.components.collators["prediction"], "collator.prediction")
    for start in range(0, len(examples), batch_size):
        batch = dict(collate(examples[start:start + batch_size]))
        if not scored:
            batch.pop("target_ids", None)
        yield batch


def refuse_masks_to_continue(run: TrainedRun, predictor: Any, examples: list[Example], places: list[str],
                             infill_option: str) -> None:
    """Refuse prompts holding mask tokens when the predictor continues prompts (it appends
    ``max_new_tokens`` >= 1 masks): it would not fill them (the predictors' own refusal speaks
    of ``batch['infill']``, which the caller does not set).
    ``places``: where each prompt came from; ``infill_option``: how the caller sets
    ``max_new_tokens`` to 0."""
    new_tokens = getattr(predictor, "max_new_tokens", None)
    if not new_tokens:
        return
    mask = run.tokenizer.mask_token_id
    holding = [place for place, example in zip(places, examples) if mask in example["prompt_ids"]]
    if holding:
        others = f" (and {len(holding) - 1} more prompts)" if len(holding) > 1 else ""
        mask_text = run.tokenizer.decode([mask], skip_special_tokens=False)
        raise XdllmError(f"{holding[0]}{others}: the prompt holds mask tokens ({mask_text}), which a continuation "
                         f"(the predictor's max_new_tokens={new_tokens}) does not fill; to fill them instead, give "
                         f"{infill_option} (infilling, where the family's predictor infills: mlm and mdlm do)")


def check_canvas_fits(run: TrainedRun, predictor: Any, longest_prompt: int) -> None:
    """Refuse, before anything runs, a canvas longer than the model's positions: it would fail
    deep inside the model, or first grow attention masks quadratically in memory."""
    new_tokens = getattr(predictor, "max_new_tokens", None) or 0
    overflow = position_overflow(run.model, predictor, longest_prompt, new_tokens)
    if overflow is not None:
        placed = f" ({overflow.placed})" if overflow.placed else ""
        raise XdllmError(f"the longest prompt ({longest_prompt} tokens with bos) plus predictor.max_new_tokens="
                         f"{new_tokens} needs {overflow.needed} positions{placed}; the model has "
                         f"max_positions={overflow.limit}: lower predictor.max_new_tokens or shorten the prompts")


SPLIT_SIZES = {"test": "num_test_samples", "validation": "num_val_samples"}


def free_text_prompts(run: TrainedRun, options: DictConfig) -> list[Example]:
    """The empty prompts free text is generated from: ``num_samples`` of them (else the run's
    held-out count of ``options.split``), with that split's sample indices, so the texts are
    those the split's prompts give. Nothing is read: the split's documents are never scored, and
    a run whose data is not here, or a prepared split smaller than the count, generates as many."""
    count_key = _split_count_key(options.split)
    count = run.config.data[count_key] if options.num_samples is None else options.num_samples
    if count == 0:  # num_samples=0 is refused with the options
        raise XdllmError(f"the run kept no {options.split} samples (data.{count_key}=0): give num_samples=N, the "
                         "number of texts to generate")
    return [Example(prompt_ids=[], target_ids=[], sample_index=index, step=0) for index in range(count)]


def _split_count_key(split: str) -> str:
    if split not in SPLIT_SIZES:
        raise XdllmError(f"unknown split '{split}'; use test or validation (or prompts_file=...)")
    return SPLIT_SIZES[split]


def _check_held_out(run: TrainedRun, options: DictConfig) -> None:
    """Refuse ``num_samples`` past the run's held-out samples of a generated task: only its first
    ``data.num_test_samples`` / ``data.num_val_samples`` were kept out of training. A prepared
    dataset's splits are disjoint whole: there the limit is the split's size, named as the
    command takes it (``num_samples``), before the datamodule checks its own count."""
    count_key = SPLIT_SIZES[options.split]
    held_out = run.config.data[count_key]
    task = run.components.task
    if options.num_samples is None and held_out == 0:  # num_samples=0 is refused with the options
        raise XdllmError(f"the run kept no {options.split} samples (data.{count_key}=0): give split=validation, "
                         "or prompts with prompts_file=...")
    if isinstance(task, PreparedTask):
        try:
            task.check_held_out(options.split, held_out if options.num_samples is None else options.num_samples,
                                "num_samples")
        except ValueError as error:
            raise XdllmError(str(error)) from error
        return
    if options.num_samples is not None and options.num_samples > held_out:
        raise XdllmError(f"num_samples={options.num_samples} is more than the run's {held_out} held-out "
                         f"{options.split} samples (data.{count_key}={held_out}); later samples were not kept "
                         f"out of training: set num_samples to at most {held_out}")


def held_out_data(run: TrainedRun, options: DictConfig) -> DiffusionData:
    """The datamodule of the run's ``options.split`` (its first ``num_samples``), checked; it
    draws the split only when a loader is asked of it."""
    _split_count_key(options.split)
    if isinstance(run.components.task, AbsentDataTask):
        raise run.components.task.missing(f"the {options.split} split")
    _check_held_out(run, options)
    config = copy.deepcopy(run.config)  # the run's own config keeps its held-out counts
    config.data.eval_batch_size = options.batch_size
    if options.num_samples is not None:
        config.data[SPLIT_SIZES[options.split]] = options.num_samples
    return build_datamodule(replace(run.components, config=config))


def drawn_when_iterated(data: DiffusionData, split: str) -> Iterator[Mapping[str, Any]]:
    """The prediction batches of ``split``, drawn when first iterated: a checked generation that
    has not run yet holds no samples."""
    yield from data.held_out_dataloader(split, "prediction")
