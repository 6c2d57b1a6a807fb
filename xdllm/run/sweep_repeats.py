"""A sweep that would run one combination twice is refused before anything runs.

``seed=0,0`` (a value given twice), or ``optim.lr=1e-3,0.001`` (one value written two ways), made
two runs of one folder: the first trained, the second was refused at that folder, and the sweep
stopped, saying to continue it, which stopped there again.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdllm.errors import XdllmError


def refuse_repeats(names: Sequence[str], what: str) -> None:
    """Refuse two combinations of one name (``names``: their folders', from their values);
    ``what`` names one combination's work (``run``, ``generation``)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise XdllmError(f"-m: two combinations are {name} (a value given twice, or one written two ways): each "
                             f"is one {what}, in a folder of that name; give each value once")
        seen.add(name)
