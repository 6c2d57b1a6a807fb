"""Tasks by name, and their samples: seeded, held out, encoded.

The built-in tasks are in :mod:`xdllm.data.builtin_tasks` (plus ``text_file`` and ``prepared``
for local data). A task draws one sample, ``(prompt symbols, target symbols)``, from a
``random.Random``. Sample ``index`` of a split is a pure function of ``(seed, split, index)``:
its generator is seeded with a stable hash of the three (never Python's salted ``hash``), so any
process, rank or resumed run regenerates exactly the same data. Training samples that equal a
held-out sample are redrawn (deterministically, from the same generator), so held-out metrics
are never measured on training data.
"""

from __future__ import annotations

import hashlib
import inspect
import random
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol, runtime_checkable

from xdllm.data.builtin_tasks import AdditionTask, SortTask, SudokuTask, VarLenCopyTask, VarLenSortTask
from xdllm.data.prepared_task import PreparedTask
from xdllm.data.text_corpus import TextFileTask
from xdllm.interfaces import Example, Tokenizer

SPLITS = ("train", "validation", "test")
MAX_REDRAWS = 1000
"""How many times a training sample is redrawn to avoid the held-out set before giving up."""

SampleKey = tuple[tuple[str | int, ...], tuple[str | int, ...]]
"""A sample as hashable ``(prompt, target)`` (symbols, or token ids for tokenized tasks);
held-out sets are sets of these."""


@runtime_checkable
class Task(Protocol):
    """A generator of ``(prompt symbols, target symbols)`` pairs with known maximum lengths."""

    name: str

    @property
    def max_prompt_len(self) -> int: ...

    @property
    def max_target_len(self) -> int: ...

    def generate(self, rng: random.Random) -> tuple[list[str], list[str]]: ...


@runtime_checkable
class TokenizedTask(Protocol):
    """A task that draws token ids itself (real text, tokenized by the run's tokenizer), built
    with ``tokenizer=`` by :func:`get_task`."""

    name: str

    @property
    def max_prompt_len(self) -> int: ...

    @property
    def max_target_len(self) -> int: ...

    def generate_ids(self, rng: random.Random) -> tuple[list[int], list[int]]: ...


TASKS: dict[str, Callable[..., Task | TokenizedTask | PreparedTask]] = {
    SortTask.name: SortTask,
    AdditionTask.name: AdditionTask,
    VarLenCopyTask.name: VarLenCopyTask,
    VarLenSortTask.name: VarLenSortTask,
    SudokuTask.name: SudokuTask,
    TextFileTask.name: TextFileTask,
    PreparedTask.name: PreparedTask,
}


def get_task(name: str, tokenizer: Tokenizer | None = None, **kwargs: object) -> Task | TokenizedTask | PreparedTask:
    """The built-in task ``name`` built with ``kwargs`` (and ``tokenizer`` for tasks that need
    one, such as ``text_file``)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; available: {', '.join(sorted(TASKS))}")
    factory = TASKS[name]
    check_task_params(name, kwargs)
    if getattr(factory, "needs_tokenizer", False):
        if tokenizer is None:
            raise ValueError(f"task {name!r} needs the run's tokenizer")
        return factory(tokenizer=tokenizer, **kwargs)
    return factory(**kwargs)


class TaskParameterError(ValueError):
    """Parameters a task does not take; ``unknown`` names them."""

    def __init__(self, message: str, unknown: Sequence[str]) -> None:
        super().__init__(message)
        self.unknown = tuple(unknown)


def task_parameter_names(name: str) -> tuple[str, ...]:
    """The parameters built-in task ``name`` takes (its tokenizer, given by the run, aside)."""
    parameters = inspect.signature(TASKS[name]).parameters
    return tuple(key for key in parameters if key != "tokenizer")


def check_task_params(name: str, params: Iterable[str]) -> None:
    """Refuse parameters task ``name`` does not take, naming them and the ones it takes."""
    accepted = task_parameter_names(name)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise TaskParameterError(f"task {name!r} takes no parameter {', '.join(unknown)} (it takes: "
                                 f"{', '.join(accepted) or 'none'})", unknown)


def sample_rng(seed: int, split: str, index: int) -> random.Random:
    """The generator of sample ``index`` of ``split``: seeded by a stable hash of all three."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    if index < 0:
        raise ValueError(f"sample index must be >= 0, got {index} (split {split!r})")
    digest = hashlib.blake2b(f"{seed}/{split}/{index}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "little"))


def draws_ids(task: Task | TokenizedTask) -> bool:
    """Whether ``task`` draws token ids itself (a :class:`TokenizedTask`) rather than symbols.
    The two protocols differ only in ``generate_ids``; looking it up costs 0.06 us, where
    ``isinstance`` against the runtime-checkable protocol costs 10 us (Python 3.11), twice per
    training sample: two thirds of the time to draw a batch of the sort task."""
    return callable(getattr(task, "generate_ids", None))


def draw_sample(task: Task | TokenizedTask, split: str, index: int, seed: int,
                exclude: AbstractSet[SampleKey] = frozenset()) -> tuple[list, list]:
    """Sample ``index`` of ``split`` as symbols (token ids for a :class:`TokenizedTask`),
    redrawn from its own generator while in ``exclude``."""
    rng = sample_rng(seed, split, index)
    draw = task.generate_ids if draws_ids(task) else task.generate
    for _ in range(MAX_REDRAWS):
        prompt, target = draw(rng)
        if (tuple(prompt), tuple(target)) not in exclude:
            return prompt, target
    raise RuntimeError(f"task {task.name!r}: sample {index} of split {split!r} matched the held-out set "
                       f"{MAX_REDRAWS} times in a row; the held-out set ({len(exclude)} distinct samples) covers "
                       "nearly the whole task space: use fewer held-out samples (data.num_val_samples, "
                       "data.num_test_samples) or a larger task")


def held_out_draws(task: Task | TokenizedTask, split: str, seed: int, count: int) -> list[tuple[list, list]]:
    """The first ``count`` samples of ``split`` as drawn (see :func:`draw_sample`)."""
    return [draw_sample(task, split, index, seed) for index in range(count)]


def sample_keys(draws: Sequence[tuple[list, list]]) -> frozenset[SampleKey]:
    """``draws`` as the set the training stream must avoid."""
    return frozenset((tuple(prompt), tuple(target)) for prompt, target in draws)


def held_out_keys(task: Task | TokenizedTask | PreparedTask, split: str, seed: int,
                  count: int) -> frozenset[SampleKey]:
    """The first ``count`` samples of ``split``, as the set the training stream must avoid
    (none for prepared data: its splits were separated when it was prepared)."""
    if isinstance(task, PreparedTask):
        return frozenset()
    return sample_keys(held_out_draws(task, split, seed, count))


def encode_symbols(tokenizer: Tokenizer, symbols: list[str], where: str) -> list[int]:
    """Token ids of ``symbols``; the tasks' lengths assume exactly one token per symbol."""
    ids = tokenizer.encode(" ".join(symbols))
    unknown = getattr(tokenizer, "unk_token_id", None)
    if unknown is not None and unknown in ids and len(ids) == len(symbols):
        symbol = symbols[ids.index(unknown)]
        raise ValueError(f"{where}: the tokenizer cannot encode the symbol {symbol!r} (it becomes its "
                         "unknown token); use a tokenizer whose vocabulary holds the task's symbols")
    if len(ids) != len(symbols):
        raise ValueError(f"{where}: the tokenizer turned {len(symbols)} symbols into {len(ids)} tokens "
                         f"({' '.join(symbols)!r}); task lengths need one token per symbol")
    return ids


def example(task: Task | TokenizedTask | PreparedTask, tokenizer: Tokenizer, split: str, index: int, seed: int, *,
            step: int = 0, exclude: AbstractSet[SampleKey] = frozenset()) -> Example:
    """Sample ``index`` of ``split`` as an :class:`~xdllm.interfaces.Example` (ids without bos/eos).

    ``step`` is the optimizer step the sample is used at (0 for held-out data); ``exclude`` the
    held-out samples a training draw must not equal. A :class:`PreparedTask` reads its stored
    sample (training positions in epochs, see :mod:`xdllm.data.prepared_task`).
    """
    if isinstance(task, PreparedTask):
        return task.example(split, index, seed, step=step)
    prompt, target = draw_sample(task, split, index, seed, exclude)
    return drawn_example(task, tokenizer, split, index, prompt, target, step)


def drawn_example(task: Task | TokenizedTask, tokenizer: Tokenizer, split: str, index: int, prompt: list,
                  target: list, step: int = 0) -> Example:
    """Sample ``index`` of ``split``, drawn as ``prompt`` and ``target``, as an :class:`~xdllm.interfaces.Example`."""
    if draws_ids(task):
        return Example(prompt_ids=prompt, target_ids=target, sample_index=index, step=step)
    where = f"task {task.name!r}, split {split!r}, sample {index}"
    return Example(prompt_ids=encode_symbols(tokenizer, prompt, where),
                   target_ids=encode_symbols(tokenizer, target, where),
                   sample_index=index, step=step)
