"""A collator as the data loaders call it: what it refuses is named by its config node."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from xdllm.errors import CollateError


class NamedCollate:
    """``collate``, turning the ``ValueError`` of samples it cannot lay out into a
    :class:`~xdllm.errors.CollateError` that names ``node`` (``collator.train``, ...)."""

    def __init__(self, collate: Callable[[Sequence[Any]], Any], node: str) -> None:
        self.collate = collate
        self.node = node

    def __call__(self, samples: Sequence[Any]) -> Any:
        try:
            return self.collate(samples)
        except ValueError as error:
            raise CollateError(f"{self.node}: {error}") from error
