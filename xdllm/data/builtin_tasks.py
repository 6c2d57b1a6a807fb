"""The built-in synthetic tasks, generated locally from a seed: sort, addition, variable-length
sort and copy, sudoku (the table in ``docs/data.md`` gives their distributions and sizes).

Each satisfies :class:`xdllm.data.tasks.Task`: ``generate(rng)`` draws one ``(prompt symbols,
target symbols)`` sample from a ``random.Random``; :mod:`xdllm.data.tasks` seeds it per sample
and lists the tasks by name.
"""

from __future__ import annotations

import math
import random
import string
from dataclasses import dataclass
from typing import ClassVar

from xdllm.data.sudoku import CELLS, follows_rules, make_puzzle

MAX_LENGTH_DRAWS = 1000
"""How many lengths a variable-length task draws to land in its range before giving up."""


def _check_at_least(value: int, minimum: int, what: str) -> None:
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class SortTask:
    """``length`` uniform random digits; the target is the same digits in ascending order."""

    length: int = 8
    name: ClassVar[str] = "sort"

    def __post_init__(self) -> None:
        _check_at_least(self.length, 1, "SortTask.length")

    @property
    def max_prompt_len(self) -> int:
        return self.length

    @property
    def max_target_len(self) -> int:
        return self.length

    def generate(self, rng: random.Random) -> tuple[list[str], list[str]]:
        digits = [str(rng.randrange(10)) for _ in range(self.length)]
        return digits, sorted(digits)


@dataclass(frozen=True)
class AdditionTask:
    """``a + b =`` with ``a, b`` uniform in ``[0, 10^num_digits)``, written zero-padded.

    The target is the sum as ``num_digits + 1`` zero-padded digits, least significant first when
    ``reverse_sum`` (the default): then every output digit depends only on its own column and
    the carry out of the digit before it, a local rule a small model finds quickly; in reading
    order the leading digit depends on the carries of every column.
    """

    num_digits: int = 3
    reverse_sum: bool = True
    name: ClassVar[str] = "addition"

    def __post_init__(self) -> None:
        _check_at_least(self.num_digits, 1, "AdditionTask.num_digits")

    @property
    def max_prompt_len(self) -> int:
        return 2 * self.num_digits + 2

    @property
    def max_target_len(self) -> int:
        return self.num_digits + 1

    def generate(self, rng: random.Random) -> tuple[list[str], list[str]]:
        bound = 10 ** self.num_digits
        a, b = rng.randrange(bound), rng.randrange(bound)
        width = self.num_digits
        prompt = [*f"{a:0{width}d}", "+", *f"{b:0{width}d}", "="]
        total = list(f"{a + b:0{width + 1}d}")
        return prompt, total[::-1] if self.reverse_sum else total


def draw_length(rng: random.Random, median: float | int, sigma: float | int, low: int, high: int,
                where: str) -> int:
    """``round(lognormal(ln(median), sigma))`` redrawn until it lies in ``[low, high]`` (a
    truncated log-normal: long-tailed, no spike at the cap)."""
    for _ in range(MAX_LENGTH_DRAWS):
        length = round(rng.lognormvariate(math.log(median), sigma))
        if low <= length <= high:
            return length
    raise ValueError(f"{where}: {MAX_LENGTH_DRAWS} lengths drawn around median {median} "
                     f"(sigma {sigma}) all fell outside [{low}, {high}]")


def _check_lengths(median: float | int, sigma: float | int, low: int, high: int, where: str) -> None:
    _check_at_least(low, 1, f"{where}.min_length")
    _check_at_least(high, low, f"{where}.max_length")
    if not median > 0 or not sigma >= 0:
        raise ValueError(f"{where}: median_length must be > 0 and sigma >= 0, got {median} and {sigma}")


@dataclass(frozen=True)
class VarLenSortTask:
    """Sort a long-tailed number of digits: lengths are a truncated log-normal (median
    ``median_length``, ``sigma``, in ``[min_length, max_length]``). The target ends where the
    prompt's length says, so a model must also learn where to put EOS. Made for packed rows:
    with the defaults a document (bos + prompt + target + eos) is 28 tokens on average and at
    most 66, about a quarter of a 128-token row.
    """

    median_length: float | int = 12.0
    sigma: float | int = 0.6
    min_length: int = 2
    max_length: int = 32
    name: ClassVar[str] = "varlen_sort"

    def __post_init__(self) -> None:
        _check_lengths(self.median_length, self.sigma, self.min_length, self.max_length,
                       "VarLenSortTask")

    @property
    def max_prompt_len(self) -> int:
        return self.max_length

    @property
    def max_target_len(self) -> int:
        return self.max_length

    def generate(self, rng: random.Random) -> tuple[list[str], list[str]]:
        length = draw_length(rng, self.median_length, self.sigma, self.min_length, self.max_length,
                             "VarLenSortTask")
        digits = [str(rng.randrange(10)) for _ in range(length)]
        return digits, sorted(digits)


@dataclass(frozen=True)
class VarLenCopyTask:
    """Unconditional documents of long-tailed length: a random letter unit copied over and over.

    Length: ``round(lognormal(ln(median_length), sigma))``, redrawn until it lies in
    ``[min_length, max_length]`` (a truncated log-normal, no spike at the cap). Content: a unit
    of ``1..max_period`` uniform random letters, repeated and cut at the length. Everything after
    the first unit is determined by it, so the loss has a lot of room to fall.
    """

    median_length: float | int = 16.0
    sigma: float | int = 1.0
    min_length: int = 2
    max_length: int = 128
    max_period: int = 4
    name: ClassVar[str] = "varlen_copy"

    def __post_init__(self) -> None:
        _check_lengths(self.median_length, self.sigma, self.min_length, self.max_length,
                       "VarLenCopyTask")
        _check_at_least(self.max_period, 1, "VarLenCopyTask.max_period")

    @property
    def max_prompt_len(self) -> int:
        return 0

    @property
    def max_target_len(self) -> int:
        return self.max_length

    def generate(self, rng: random.Random) -> tuple[list[str], list[str]]:
        length = draw_length(rng, self.median_length, self.sigma, self.min_length, self.max_length,
                             "VarLenCopyTask")
        unit = [rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, self.max_period))]
        return [], [unit[i % len(unit)] for i in range(length)]


@dataclass(frozen=True)
class SudokuTask:
    """9x9 sudoku with a unique solution (checked by a solver), ``num_givens`` cells given.

    Prompt: the 81 cells in row-major order, ``0`` for a blank; target: the 81 digits of the
    solution (the model writes every cell, copying the givens). Besides exact match, generation
    reports :meth:`answer_scores`: solved rate, cell accuracy on the blanks, and whether the
    output grid follows the rules even where it differs from the solution.
    """

    num_givens: int = 36
    name: ClassVar[str] = "sudoku"
    grid_shape: ClassVar[tuple[int, int]] = (9, 9)
    """The answer read as a grid: the history views draw it as one (xdllm.history.grid)."""

    def __post_init__(self) -> None:
        if not 17 <= self.num_givens <= CELLS:
            raise ValueError(f"SudokuTask.num_givens must be in [17, 81], got {self.num_givens}")

    @property
    def max_prompt_len(self) -> int:
        return CELLS

    @property
    def max_target_len(self) -> int:
        return CELLS

    def generate(self, rng: random.Random) -> tuple[list[str], list[str]]:
        puzzle, solution = make_puzzle(rng, self.num_givens)
        return [str(value) for value in puzzle], [str(value) for value in solution]

    def answer_scores(self, prompt: list[str], target: list[str],
                      output: list[str]) -> dict[str, tuple[float, float]]:
        """``{name: (sum, count)}`` of one answer: ``solved`` (every cell right),
        ``blank_accuracy`` (right cells among the prompt's blanks) and ``rule_valid`` (81 digits
        whose rows, columns and boxes are permutations of 1-9)."""
        blanks = [cell for cell, symbol in enumerate(prompt[:CELLS]) if symbol == "0"]
        right = sum(1 for cell in blanks if cell < len(output) and output[cell] == target[cell])
        digits = [int(symbol) if symbol.isdigit() else 0 for symbol in output[:CELLS]]
        return {"solved": (float(output[:CELLS] == target[:CELLS]), 1.0),
                "blank_accuracy": (float(right), float(len(blanks))),
                "rule_valid": (float(follows_rules(digits)), 1.0)}
