"""A multiple-choice ``.jsonl`` prompts_file: one question per line,
``{"prompt": ..., "choices": [...], "answer": <index of the right choice>}``, each choice
tokenized as the prompt's response (on its own, as a response is: with a BPE tokenizer a
leading space belongs in the choice's text).

A run trained on free text saw documents, not prompts and responses: there a question becomes
one document per choice, the prompt's tokens then the choice's, of which the prompt's are
``context`` (given, never scored), so that the choice is scored where the model learned such
text, on the canvas it learned (an EOS fill counted from the document's start)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from xdllm.errors import XdllmError
from xdllm.interfaces import Example, Tokenizer
from xdllm.run.prompt_sources import (
    CHOICES_FIELD,
    PROMPT_FIELD,
    prompt_example,
    refuse_more_than_held,
    response_ids,
    text_file_lines,
)

ANSWER_FIELD = "answer"


@dataclass(frozen=True)
class ChoiceFile:
    """The (prompt, choice) pairs of the questions, question by question."""

    examples: list[Example]
    """One per choice, the choice as its ``target_ids``; ``sample_index`` is the question's, so
    that the choices of a question are scored with the same noise draws."""
    questions: list[int]
    """The question (0, 1, ...) each example belongs to."""
    answers: list[int]
    """Each question's right choice."""
    places: list[str]
    """Where each example's question is: ``<file>:<line>``."""
    context: list[int]
    """How many leading response tokens of each example are the prompt's (free text), given
    and not scored; 0 where the prompt is the example's prompt."""
    texts: list[tuple[str, list[str]]]
    """Each question's prompt and choices as the file gives them."""
    sha256: str
    """The SHA-256 of the file's bytes (a training run's checkpoints record it)."""


def is_choice_file(path: Path) -> bool:
    """Whether ``path`` is a ``.jsonl`` file whose first non-blank line holds ``choices``."""
    if path.suffix != ".jsonl" or not path.is_file():
        return False
    with path.open(encoding="utf-8-sig", errors="replace") as lines:
        for line in lines:
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(record, dict) and CHOICES_FIELD in record
    return False


def read_choice_file(tokenizer: Tokenizer, path: Path, num_questions: int | None = None,
                     as_documents: bool = False) -> ChoiceFile:
    """The first ``num_questions`` questions of ``path`` (None: all; a file holding fewer is
    refused), tokenized with the run's tokenizer, each choice after its prompt as one document
    where ``as_documents`` (a run trained on free text); a malformed line is refused naming it."""
    lines, sha256 = text_file_lines(path, "multiple-choice file")
    examples: list[Example] = []
    questions: list[int] = []
    answers: list[int] = []
    places: list[str] = []
    context: list[int] = []
    texts: list[tuple[str, list[str]]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if num_questions is not None and len(answers) == num_questions:
            break
        where = f"{path}:{number}"
        prompt, choices, answer = _question(line, where)
        question = len(answers)
        prompt_ids = prompt_example(tokenizer, prompt, question, where)["prompt_ids"]
        for index, choice in enumerate(choices):
            target = response_ids(tokenizer, choice, f"{where}: choice {index}")
            if as_documents:
                examples.append(Example(prompt_ids=[], target_ids=prompt_ids + target, sample_index=question, step=0))
            else:
                examples.append(Example(prompt_ids=prompt_ids, target_ids=target, sample_index=question, step=0))
            questions.append(question)
            places.append(where)
            context.append(len(prompt_ids) if as_documents else 0)
        answers.append(answer)
        texts.append((prompt, choices))
    if not answers:
        raise XdllmError(f"prompts_file {path} holds no questions")
    refuse_more_than_held(num_questions, len(answers), "question", path)
    return ChoiceFile(examples, questions, answers, places, context, texts, sha256)


def _question(line: str, where: str) -> tuple[str, list[str], int]:
    """A line's prompt, choices and right answer."""
    shape = (f'a multiple-choice .jsonl holds one JSON object per line: {{"{PROMPT_FIELD}": "...", '
             f'"{CHOICES_FIELD}": ["...", "...", ...], "{ANSWER_FIELD}": <index of the right choice>}}')
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise XdllmError(f"{where}: not valid JSON ({error.msg} at column {error.colno}); {shape}") from error
    if not isinstance(record, dict) or not isinstance(record.get(PROMPT_FIELD), str):
        raise XdllmError(f"{where}: no string {PROMPT_FIELD!r}; {shape}")
    choices = record.get(CHOICES_FIELD)
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
        raise XdllmError(f"{where}: {CHOICES_FIELD!r} must be a list of two or more strings, got "
                         f"{json.dumps(choices)[:80]}; {shape}")
    answer = record.get(ANSWER_FIELD)
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
        raise XdllmError(f"{where}: {ANSWER_FIELD!r} must be the index of the right choice, an integer in "
                         f"[0, {len(choices)}), got {json.dumps(answer)}")
    return record[PROMPT_FIELD], choices, answer
