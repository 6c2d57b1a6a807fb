"""Count the calls that make a CUDA device wait for the host, on the CPU.

``count_host_syncs()`` patches the tensor methods that read a value back (``item``, ``tolist``,
``__bool__``, ``__int__``, ``__float__``, ``nonzero``, ``torch.nonzero``), boolean-mask indexing
(``t[mask]``, ``t[mask] = ...``: its result's shape depends on the data) and ``new_tensor``
(Python values copied to the tensor's device: on CUDA a copy from pageable host memory, which
waits; an H200 run showed one per step in the prefix cache that the CPU count had missed) for
the duration of a ``with`` block, and counts them in a ``Counter`` keyed by the call's name. On
CUDA each of them is a stream synchronisation, so a CPU test can check how many a decoding loop
makes per step or per block.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import torch

READS = ("item", "tolist", "__bool__", "__int__", "__float__", "nonzero", "new_tensor")
INDEXING = ("__getitem__", "__setitem__")


def _masks(index: object) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(part, torch.Tensor) and part.dtype == torch.bool for part in parts)


@contextlib.contextmanager
def count_host_syncs() -> Iterator[Counter]:
    """Patch the syncing calls for the ``with`` block; yield the counter they add to."""
    counts: Counter = Counter()
    originals = {(torch.Tensor, name): getattr(torch.Tensor, name) for name in READS + INDEXING}
    originals[(torch, "nonzero")] = torch.nonzero

    def counted(name: str, original):
        def call(*args, **kwargs):
            if name not in INDEXING or _masks(args[1]):
                counts[name] += 1
            return original(*args, **kwargs)
        return call

    for (owner, name), original in originals.items():
        setattr(owner, name, counted(name, original))
    try:
        yield counts
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)
