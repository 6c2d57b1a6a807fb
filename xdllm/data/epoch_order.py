"""Epochs over a fixed set of samples in a seeded shuffled order, with nothing stored per sample.

Training position ``p`` of a split of ``n`` samples lies in epoch ``e = p // n`` at offset
``k = p % n`` and reads sample ``permute(k)`` of a permutation of ``[0, n)`` keyed by
``(seed, e)``. Each epoch visits every sample once, in its own order.

The permutation is a Feistel network over the smallest domain ``[0, 4^h)`` that holds ``n``
(two ``h``-bit halves, :data:`ROUNDS` rounds of a 64-bit mixing function), with cycle walking: an
output ``>= n`` is fed through the network again until it lands inside ``[0, n)``. A Feistel
network is a bijection of its domain, and cycle walking restricts a bijection to a subset, so
``permute`` is a bijection of ``[0, n)`` for any ``n``. It costs a few microseconds per position
(``4^h < 4n``, so fewer than four walks on average) and no memory: a stored permutation would
take 8 bytes per sample and grow with the corpus.
"""

from __future__ import annotations

import hashlib

ROUNDS = 6
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix64(value: int) -> int:
    """SplitMix64's finaliser: every output bit depends on every input bit."""
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


class EpochPermutation:
    """A seeded permutation of ``[0, size)``: ``permutation(k)`` is the sample at offset ``k``."""

    def __init__(self, size: int, seed: int, epoch: int) -> None:
        if size < 1:
            raise ValueError(f"EpochPermutation: size must be >= 1, got {size}")
        if seed < 0 or epoch < 0:
            raise ValueError(f"EpochPermutation: seed and epoch must be >= 0, got {seed} and {epoch}")
        self.size = size
        self.half_bits = ((size - 1).bit_length() + 1) // 2  # 4^h >= size
        self.half_mask = (1 << self.half_bits) - 1
        digest = hashlib.blake2b(f"epoch-order/{seed}/{epoch}".encode(), digest_size=8).digest()
        key = int.from_bytes(digest, "little")
        self.round_keys = tuple(_mix64((key + (r + 1) * _GOLDEN) & _MASK64) for r in range(ROUNDS))

    def _feistel(self, value: int) -> int:
        bits, mask = self.half_bits, self.half_mask
        left, right = value >> bits, value & mask
        for round_key in self.round_keys:  # the round function is _mix64(right ^ key), inlined
            mixed = right ^ round_key
            mixed = ((mixed ^ (mixed >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
            mixed = ((mixed ^ (mixed >> 27)) * 0x94D049BB133111EB) & _MASK64
            left, right = right, left ^ ((mixed ^ (mixed >> 31)) & mask)
        return (left << bits) | right

    def __call__(self, offset: int) -> int:
        if not 0 <= offset < self.size:
            raise ValueError(f"EpochPermutation: offset {offset} outside [0, {self.size})")
        value = self._feistel(offset)
        while value >= self.size:
            value = self._feistel(value)
        return value


class EpochOrder:
    """Training position -> sample index: epoch after epoch over ``size`` samples, each epoch
    shuffled by its own :class:`EpochPermutation` keyed by ``(seed, epoch)``."""

    def __init__(self, size: int, seed: int) -> None:
        if size < 1:
            raise ValueError(f"EpochOrder: size must be >= 1, got {size}")
        self.size = size
        self.seed = seed
        self._epoch, self._permutation = -1, None

    def __call__(self, position: int) -> int:
        if position < 0:
            raise ValueError(f"EpochOrder: position must be >= 0, got {position}")
        epoch, offset = divmod(position, self.size)
        if epoch != self._epoch:
            self._epoch, self._permutation = epoch, EpochPermutation(self.size, self.seed, epoch)
        return self._permutation(offset)
