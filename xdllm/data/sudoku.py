"""9x9 sudoku: a solution counter, a seeded generator of puzzles with a unique solution, and the
checks the sudoku metrics use.

A grid is a list of 81 ints in row-major order, 0 for a blank. The solver keeps one 9-bit mask of
used digits per row, column and box and always branches on the blank with the fewest candidates,
which solves the puzzles generated here in well under a millisecond each.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

CELLS = 81
ALL_DIGITS = 0x3FE  # bits 1..9
ROW = [cell // 9 for cell in range(CELLS)]
COL = [cell % 9 for cell in range(CELLS)]
BOX = [(cell // 27) * 3 + (cell % 9) // 3 for cell in range(CELLS)]
UNITS = ([[r * 9 + c for c in range(9)] for r in range(9)]
         + [[r * 9 + c for r in range(9)] for c in range(9)]
         + [[(b // 3) * 27 + (b % 3) * 3 + r * 9 + c for r in range(3) for c in range(3)] for b in range(9)])
"""The 27 rows, columns and boxes, each as its 9 cell indices."""
CELL_UNITS = [[UNITS[ROW[cell]], UNITS[9 + COL[cell]], UNITS[18 + BOX[cell]]] for cell in range(CELLS)]
"""The row, column and box of each cell, as cell indices."""
POPCOUNT = [bin(mask).count("1") for mask in range(ALL_DIGITS + 1)]
DIGITS = [[digit for digit in range(1, 10) if mask >> digit & 1] for mask in range(ALL_DIGITS + 1)]
"""The digits in each 9-bit mask, ascending."""


def _check_grid(grid: Sequence[int], where: str) -> None:
    if len(grid) != CELLS or any(not 0 <= value <= 9 for value in grid):
        raise ValueError(f"{where}: a sudoku grid is 81 values in 0..9, got {list(grid)!r}")


def count_solutions(grid: Sequence[int], limit: int = 2, rng: random.Random | None = None,
                    solution: list[int] | None = None, excluded: tuple[int, int] | None = None) -> int:
    """How many solutions ``grid`` has, counting up to ``limit``.

    With ``solution``, the first solution found is written into it; with ``rng``, candidate
    digits are tried in a random order (used to draw a random full grid); with ``excluded``,
    ``(cell, digit)``, only the solutions whose blank ``cell`` holds another digit count.
    """
    _check_grid(grid, "count_solutions")
    if excluded is not None and not (0 <= excluded[0] < CELLS and grid[excluded[0]] == 0 and 1 <= excluded[1] <= 9):
        raise ValueError(f"count_solutions: excluded must be (a blank cell of the grid, a digit 1-9), got {excluded}")
    banned_cell, banned = (excluded[0], 1 << excluded[1]) if excluded is not None else (-1, 0)
    cells = list(grid)
    rows, cols, boxes = [0] * 9, [0] * 9, [0] * 9
    for cell, value in enumerate(cells):
        if value:
            bit = 1 << value
            if rows[ROW[cell]] & bit or cols[COL[cell]] & bit or boxes[BOX[cell]] & bit:
                return 0  # a given repeats in a unit
            rows[ROW[cell]] |= bit
            cols[COL[cell]] |= bit
            boxes[BOX[cell]] |= bit
    blanks = [cell for cell, value in enumerate(cells) if not value]
    found = 0

    def search() -> bool:
        nonlocal found
        best, best_options, best_count = -1, 0, 10
        for cell in blanks:
            if cells[cell]:
                continue
            options = ALL_DIGITS & ~(rows[ROW[cell]] | cols[COL[cell]] | boxes[BOX[cell]])
            if cell == banned_cell:
                options &= ~banned
            count = POPCOUNT[options]
            if count < best_count:
                best, best_options, best_count = cell, options, count
                if count <= 1:
                    break
        if best < 0:
            found += 1
            if solution is not None and found == 1:
                solution[:] = cells
            return found >= limit
        digits = DIGITS[best_options]
        if rng is not None:
            digits = list(digits)
            rng.shuffle(digits)
        r, c, b = ROW[best], COL[best], BOX[best]
        for digit in digits:
            bit = 1 << digit
            cells[best] = digit
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            stop = search()
            rows[r] &= ~bit
            cols[c] &= ~bit
            boxes[b] &= ~bit
            cells[best] = 0
            if stop:
                return True
        return False

    search()
    return found


def random_solution(rng: random.Random) -> list[int]:
    """A uniformly shuffled search's first full grid: a random valid sudoku solution."""
    solution: list[int] = []
    count_solutions([0] * CELLS, limit=1, rng=rng, solution=solution)
    return solution


class _Givens:
    """The digits used in each row, column and box of a puzzle, as 9-bit masks."""

    def __init__(self, grid: Sequence[int]) -> None:
        self.grid = list(grid)
        self.used = [0] * 27  # rows, then columns, then boxes
        for cell, value in enumerate(self.grid):
            if value:
                self.flip(cell, value)

    def flip(self, cell: int, value: int) -> None:
        """Mark ``value`` used (or no longer used) in ``cell``'s row, column and box."""
        bit = 1 << value
        for unit in (ROW[cell], 9 + COL[cell], 18 + BOX[cell]):
            self.used[unit] ^= bit

    def candidates(self, cell: int) -> int:
        return ALL_DIGITS & ~(self.used[ROW[cell]] | self.used[9 + COL[cell]] | self.used[18 + BOX[cell]])

    def blank(self, cell: int) -> None:
        self.flip(cell, self.grid[cell])
        self.grid[cell] = 0

    def fill(self, cell: int, value: int) -> None:
        self.grid[cell] = value
        self.flip(cell, value)

    def forced(self, cell: int, digit: int) -> bool:
        """Whether blank ``cell`` can only hold ``digit``: its only candidate, or the only blank
        of one of its units that can take it (so blanking it kept a unique solution unique)."""
        bit = 1 << digit
        if self.candidates(cell) == bit:
            return True
        return any(all(other == cell or self.grid[other] or not self.candidates(other) & bit for other in unit)
                   for unit in CELL_UNITS[cell])


def make_puzzle(rng: random.Random, num_givens: int) -> tuple[list[int], list[int]]:
    """``(puzzle, solution)``: ``num_givens`` cells of a random solution kept, the rest blank,
    with exactly one solution.

    Cells are blanked in a random order, each only if the solution stays unique; when a grid
    cannot get down to ``num_givens`` that way, a new grid is drawn. A blanked cell that the
    givens force (a single candidate, or a unit's only place for its digit) keeps the solution
    unique without a search; any other is searched for one solution with another digit there
    (the grid had one solution, the one drawn: a second must differ in the blanked cell), which
    stops sooner than counting the solutions up to two.
    """
    if not 17 <= num_givens <= CELLS:
        raise ValueError(f"num_givens must be in [17, 81] (no sudoku with fewer than 17 givens has a "
                         f"unique solution), got {num_givens}")
    for _ in range(100):
        solution = random_solution(rng)
        puzzle = _Givens(solution)
        givens = CELLS
        order = list(range(CELLS))
        rng.shuffle(order)
        for cell in order:
            if givens == num_givens:
                return puzzle.grid, solution
            puzzle.blank(cell)
            if puzzle.forced(cell, solution[cell]) or not count_solutions(puzzle.grid, limit=1,
                                                                          excluded=(cell, solution[cell])):
                givens -= 1
            else:
                puzzle.fill(cell, solution[cell])
        if givens == num_givens:
            return puzzle.grid, solution
    raise ValueError(f"could not reach {num_givens} givens with a unique solution in 100 grids; "
                     "ask for more givens")


def follows_rules(grid: Sequence[int]) -> bool:
    """Whether every row, column and box of a full grid holds each digit 1-9 once."""
    if len(grid) != CELLS:
        return False
    return all(sorted(grid[cell] for cell in unit) == list(range(1, 10)) for unit in UNITS)
