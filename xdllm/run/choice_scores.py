"""``xdllm eval`` on a multiple-choice prompts_file (:mod:`xdllm.run.choice_file`): every choice
is scored by the model's negative log-likelihood of it as the prompt's response, from the family
evaluator's ``sample_nll`` (exact for ``arlm`` and the hybrid's causal branch, the ELBO bound for
``mdlm`` and ``bd3lm``, its choices sharing their noise draws), and a question counts as right
when its right choice scores strictly lowest. A run trained on free text scores each choice as
the end of a document that starts with the prompt (:mod:`xdllm.run.choice_file`). Nothing is
generated; the only file written is the per-question records, where ``choice_records=`` asks for
them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float, Integer
from omegaconf import DictConfig
from torch import Tensor

from xdllm.data.named_collate import NamedCollate
from xdllm.errors import XdllmError
from xdllm.evaluate.task_scores import TaskScoredEvaluator
from xdllm.run.build import RunComponents, position_overflow
from xdllm.run.checkpoint import TrainedRun
from xdllm.run.choice_file import ChoiceFile, read_choice_file
from xdllm.run.device import autocast, autocast_dtype, batch_to
from xdllm.run.free_text import is_free_text
from xdllm.run.generate import checkpoint_fields, place_run
from xdllm.temporary_files import write_jsonl_atomically
from xdllm.train.processes import ONE_PROCESS, Processes

CHOICE_FIGURES = ("choice_accuracy", "choice_accuracy_per_token", "choice_accuracy_per_char", "answer_nll")
"""The figures of a multiple-choice file that depend on the weights (:func:`choice_accuracy`)."""
FAMILY_EVALUATORS = {"mlm": "xdllm_models.mlm.metrics.MLMEvaluator"}
"""The evaluators that gave a family a likelihood after runs were trained with one without."""
LIKELIHOOD_FAMILIES = (
    "arlm (exact), hybrid (exact, its causal branch), udlm (exact, its encoder), mdlm, bd3lm and mlm (the ELBO bound)")


@dataclass(frozen=True)
class ScoredChoices:
    """The questions of a multiple-choice file and each choice's NLL (nats) and tokens."""

    choices: ChoiceFile
    nll: Float[Tensor, " examples"]
    tokens: Integer[Tensor, " examples"]


def choice_metrics(run: TrainedRun, options: DictConfig) -> dict[str, Any]:
    """Accuracy of the run's likelihood at picking each question's right choice; with
    ``options.choice_records``, every question's record written there (:func:`choice_records`)."""
    scored = scored_choices(run, options)
    figures = {**checkpoint_fields(run), "prompts_file": options.prompts_file,
               **choice_accuracy(scored.nll, scored.tokens, scored.choices)}
    if options.get("choice_records"):
        write_jsonl_atomically(options.choice_records, choice_records(scored))
        figures["choice_records"] = options.choice_records
    return figures


def scored_choices(run: TrainedRun, options: DictConfig) -> ScoredChoices:
    """Every choice of ``options.prompts_file`` (its first ``num_samples`` questions) scored."""
    path = Path(options.prompts_file)
    _refuse_generation_options(options, path)
    sample_nll = _family_sample_nll(run.components, path)
    choices = read_choice_file(run.tokenizer, path, options.num_samples, as_documents=is_free_text(run.components.task))
    collate = NamedCollate(run.components.collators["val"], "collator.val")
    _check_all_positions(run.model, collate, choices, options.batch_size)
    device, dtype = place_run(run, options.device)
    with torch.inference_mode(), autocast(device, dtype):
        nll, tokens = shared_choice_nll(run.model, collate, sample_nll, choices, options.batch_size, device, path,
                                        ONE_PROCESS)
    return ScoredChoices(choices, nll, tokens)


class ChoiceProbe:
    """A multiple-choice file scored at every validation of a training run
    (``validation_choices=``): ``val/<name>`` for each of :data:`CHOICE_FIGURES`, under the
    autocast ``xdllm eval`` takes for the run's precision on the model's device (bf16 on CUDA for
    a ``bf16*`` run), so the figures logged are those ``xdllm eval`` gives for the same weights.
    With several processes each scores its share of the batches and the scores are gathered, so
    every process logs the same figures (:func:`shared_choice_nll`)."""

    def __init__(self, path: str, components: RunComponents, batch_size: int) -> None:
        if not path.strip():
            raise XdllmError("validation_choices= is empty: give a multiple-choice .jsonl file, or null for none")
        self.path = Path(path)
        self.sample_nll = _family_sample_nll(components, self.path)
        self.choices = read_choice_file(components.tokenizer, self.path, as_documents=is_free_text(components.task))
        self.collate = NamedCollate(components.collators["val"], "collator.val")
        self.batch_size = batch_size
        self.precision = components.config.trainer.get("precision")
        _check_all_positions(components.model, self.collate, self.choices, batch_size)

    def __call__(self, model: torch.nn.Module, processes: Processes = ONE_PROCESS) -> dict[str, float]:
        device = next(model.parameters()).device
        with autocast(device, autocast_dtype(self.precision, device)):
            nll, tokens = shared_choice_nll(model, self.collate, self.sample_nll, self.choices, self.batch_size,
                                            device, self.path, processes)
        scores = choice_accuracy(nll, tokens, self.choices)
        return {name: float(scores[name]) for name in CHOICE_FIGURES}


def _family_sample_nll(components: RunComponents, path: Path) -> Callable[..., tuple[Tensor, Tensor]]:
    """The family evaluator's ``sample_nll``, or a refusal naming the families that have one."""
    sample_nll = sample_nll_of(components.evaluator)
    if sample_nll is None:
        family = components.config.get("model_family")
        older = (f" (an {family} run trained before its evaluator had one: give "
                 f"evaluator._target_={FAMILY_EVALUATORS[family]})" if family in FAMILY_EVALUATORS else "")
        raise XdllmError(f"{path} is a multiple-choice file, scored by the model's likelihood of each choice, and "
                         f"the {family} family's evaluator has no likelihood of a response{older}; families that "
                         f"have one: {LIKELIHOOD_FAMILIES}")
    return sample_nll


def shared_choice_nll(model: torch.nn.Module, collate: NamedCollate, sample_nll: Callable[..., tuple[Tensor, Tensor]],
                      choices: ChoiceFile, size: int, device: torch.device, path: Path, processes: Processes
                      ) -> tuple[Tensor, Tensor]:
    """:func:`_choice_nll` of every choice, split among ``processes``: each scores a run of
    consecutive batches (the batches one process would make, so the same scores) and the
    scores are gathered to every process. A process whose run is short scores its first batch
    again and drops it, so that all run as many forwards (under FSDP every forward gathers the
    weights from all of them)."""
    starts = list(range(0, len(choices.examples), size))
    if processes.count == 1:  # xdllm eval, or a run on one process
        return _choice_nll(model, collate, sample_nll, choices, size, device, path, starts)
    share = -(-len(starts) // processes.count)
    mine = starts[processes.rank * share:(processes.rank + 1) * share]
    nll, tokens = _choice_nll(model, collate, sample_nll, choices, size, device, path,
                              mine + (mine or starts)[:1] * (share - len(mine)))
    kept = sum(min(size, len(choices.examples) - start) for start in mine)
    local = torch.zeros(2, share * size, dtype=torch.float64)
    local[0, :kept], local[1, :kept] = nll[:kept], tokens[:kept].double()
    gathered = processes.gather(local.to(device)).cpu()  # [processes, 2, share * size]
    values = gathered.transpose(0, 1).reshape(2, -1)[:, :len(choices.examples)]
    return values[0], values[1].long()


def _choice_nll(model: torch.nn.Module, collate: NamedCollate, sample_nll: Callable[..., tuple[Tensor, Tensor]],
                choices: ChoiceFile, size: int, device: torch.device, path: Path,
                starts: list[int]) -> tuple[Tensor, Tensor]:
    """The NLL and tokens (on the CPU) of the choices in the batches of ``size`` examples from
    each of ``starts``."""
    nll, tokens = [], []
    for start in starts:
        batch = without_scores_on_context(collated_choices(collate, choices, start, size),
                                          choices.context[start:start + size])
        try:
            values, counts = sample_nll(model, batch_to(batch, device))
        except ValueError as error:
            raise XdllmError(f"{path}: {error}") from error
        nll.append(values.double())
        tokens.append(counts)
    return torch.cat(nll).cpu(), torch.cat(tokens).cpu()


def _check_all_positions(model: torch.nn.Module, collate: NamedCollate, choices: ChoiceFile, size: int) -> None:
    """Every batch checked before the model runs (collated again to be scored, not kept)."""
    for start in range(0, len(choices.examples), size):
        _check_positions(model, collated_choices(collate, choices, start, size), choices.places[start:start + size])


def choice_records(scored: ScoredChoices) -> list[dict[str, Any]]:
    """One record per question: where it is (``line``), its ``prompt``, ``choices`` and
    ``answer``, each choice's ``nll`` (nats) and ``tokens``, the choice with the lowest NLL
    (``picked``: the first of equals) and whether the right one is strictly lowest (``right``)."""
    choices, nll, tokens = scored.choices, scored.nll.tolist(), scored.tokens.tolist()
    records, start = [], 0
    for question, (prompt, texts) in enumerate(choices.texts):
        scores, counts = nll[start:start + len(texts)], tokens[start:start + len(texts)]
        answer = choices.answers[question]
        records.append({"line": choices.places[start], "prompt": prompt, "choices": texts, "answer": answer,
                        "nll": scores, "tokens": counts, "picked": scores.index(min(scores)),
                        "right": all(scores[answer] < score for i, score in enumerate(scores) if i != answer)})
        start += len(texts)
    return records


def collated_choices(collate: NamedCollate, choices: ChoiceFile, start: int, size: int) -> Mapping[str, Any]:
    """The val collator's batch of the examples from ``start``; its refusal names their lines."""
    try:
        return collate(choices.examples[start:start + size])
    except XdllmError as error:
        end = min(start + size, len(choices.examples)) - 1
        lines = choices.places[start] if choices.places[start] == choices.places[end] else (
            f"{choices.places[start]} to {choices.places[end].rpartition(':')[2]}")
        raise XdllmError(f"{lines} (one batch of choices, batch_size={size}): {error}") from error


SUPERVISED_KEYS = ("loss_mask", "supervised_mask")
"""The batch entries that mark a row's supervised tokens: the families' ``loss_mask``, the MLM
family's ``supervised_mask``."""


def without_scores_on_context(batch: Mapping[str, Any], context: list[int]) -> dict[str, Any]:
    """``batch`` with each row's first ``context`` supervised tokens (a prompt laid out as the
    start of a free-text document) taken out of its supervised tokens: given, never masked, not
    scored."""
    batch = dict(batch)
    if any(context):
        for key in (key for key in SUPERVISED_KEYS if key in batch):
            supervised = batch[key] != 0
            scored = supervised & (supervised.long().cumsum(1) > torch.tensor(context)[:, None])
            batch[key] = scored.to(batch[key].dtype)
    return batch


def sample_nll_of(evaluator: Any) -> Callable[..., tuple[Tensor, Tensor]] | None:
    """The evaluator's ``sample_nll`` (a task-scored evaluator's: its family evaluator's), or None."""
    family_evaluator = evaluator.inner if isinstance(evaluator, TaskScoredEvaluator) else evaluator
    found = getattr(family_evaluator, "sample_nll", None)
    return found if callable(found) else None


def choice_accuracy(nll: Float[Tensor, " examples"], tokens: Integer[Tensor, " examples"],
                    choices: ChoiceFile) -> dict[str, float | int]:
    """``choice_accuracy``: the share of questions whose right choice has the strictly lowest
    NLL; ``choice_accuracy_per_token``: the same by NLL per token (through the first EOS), which
    does not favour short choices; ``choice_accuracy_per_char``: by NLL per character of the
    choice's text (lm-eval's ``acc_norm``, the same whatever the tokenizer); ``chance``: what
    picking at random scores; ``answer_nll``: the right choices' mean NLL per token."""
    question = torch.tensor(choices.questions)
    n_questions = len(choices.answers)
    first = torch.zeros(n_questions, dtype=torch.long).scatter_reduce(
        0, question, torch.arange(len(question)), "amin", include_self=False)
    right = first + torch.tensor(choices.answers)
    per_token = nll / tokens.clamp_min(1)
    chars = torch.tensor([len(text) for _, texts in choices.texts for text in texts], dtype=nll.dtype)
    accuracy = {}
    for name, score in (("choice_accuracy", nll), ("choice_accuracy_per_token", per_token),
                        ("choice_accuracy_per_char", nll / chars.clamp_min(1))):
        best_other = torch.full((n_questions,), float("inf"), dtype=score.dtype).scatter_reduce(
            0, question, torch.where(_is_right(right, question), float("inf"), score), "amin")
        accuracy[name] = float((score[right] < best_other).double().mean())
    n_choices = torch.bincount(question, minlength=n_questions)
    return {"questions": n_questions, **accuracy, "chance": float((1.0 / n_choices).mean()),
            "answer_nll": float(per_token[right].mean())}


def _is_right(right: Tensor, question: Tensor) -> Tensor:
    """Which examples are their question's right choice."""
    return torch.arange(len(question)) == right[question]


def _check_positions(model: torch.nn.Module, batch: Mapping[str, Any], places: list[str]) -> None:
    """Refuse a prompt and choice longer than the model's positions, naming its line."""
    real = batch["attention_mask"].bool()
    used = torch.where(real, batch["positions"], -1).amax(1) + 1 if "positions" in batch else real.sum(1)
    row = int(used.argmax())
    overflow = position_overflow(model, None, int(used[row]), 0)
    if overflow is not None:
        raise XdllmError(f"{places[row]}: the prompt with a choice takes {overflow.needed} positions as the val "
                         f"collator lays it out; the model has max_positions={overflow.limit}: shorten the prompt "
                         "or the choices")


def _refuse_generation_options(options: DictConfig, path: Path) -> None:
    """A multiple-choice file generates nothing: predictor options and a judge do not apply."""
    given = [f"predictor.{key}" for key in options.predictor] + (["judge"] if options.get("judge") else [])
    if given:
        raise XdllmError(f"{path} is a multiple-choice file: eval scores its choices by the model's likelihood and "
                         f"generates nothing, so {', '.join(given)} does not apply")
