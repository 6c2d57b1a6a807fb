"""The drafter's cache of its context keys and values across speculative rounds.

Every drafter layer attends to the context (the target's features at every kept cache slot) with
keys and values projected from it. Without a cache each draft recomputes them for the whole
context in every layer; with one, a draft computes them only for the slots written since the
last draft and reads the rest back. Slots are those of the target's
:class:`~xdllm.nn.KVCache`, one for one: a verification writes its block from the target
cache's fill length on, so the drafter cache is rewound there first (:meth:`rewind`, the rolled
back slots of rejected drafts included), and the next draft computes from that slot on. Slots
that became padding keep their keys and values: the mask never lets a query see them.
"""

from __future__ import annotations

from torch import Tensor

ContextKeysValues = list[tuple[Tensor, Tensor]]
"""Per drafter layer, the context's rotated keys and values, each ``[batch, heads, ctx, head_dim]``."""


class DrafterContextCache:
    """Per layer ``[batch, heads, capacity, head_dim]`` key and value buffers (allocated at the
    first write) and how many slots hold keys and values of the current context."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"DrafterContextCache: capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.length = 0
        self.buffers: ContextKeysValues = []

    def first_fresh_slot(self, context_width: int) -> int:
        """Where a draft over ``context_width`` slots starts projecting: the cache's length (a
        ValueError when the context is shorter: the cache was not rewound)."""
        if context_width < self.length:
            raise ValueError(f"DrafterContextCache holds {self.length} slots but the context has "
                             f"{context_width}: rewind it to where the target rewrote its cache")
        return self.length

    def rewind(self, length: int) -> None:
        """Slots from ``length`` on are about to be rewritten: forget them."""
        self.length = min(self.length, length)

    def extend(self, fresh: ContextKeysValues) -> ContextKeysValues:
        """Write the keys and values of the slots after :attr:`length`; return every layer's
        keys and values of the whole context."""
        width = fresh[0][0].shape[2]
        end = self.length + width
        if end > self.capacity:
            raise ValueError(f"DrafterContextCache: {end} context slots exceed its capacity of {self.capacity}")
        if not self.buffers:
            shape = (*fresh[0][0].shape[:2], self.capacity, fresh[0][0].shape[3])
            self.buffers = [(key.new_zeros(shape), value.new_zeros(shape)) for key, value in fresh]
        for (key, value), (new_key, new_value) in zip(self.buffers, fresh):
            key[:, :, self.length:end] = new_key
            value[:, :, self.length:end] = new_value
        self.length = end
        return [(key[:, :, :end], value[:, :, :end]) for key, value in self.buffers]

