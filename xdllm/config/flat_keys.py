"""Nested options as dotted keys: ``{"optim": {"lr": 1e-3}}`` is ``{"optim.lr": 1e-3}``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flat_keys(options: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Each leaf of ``options`` by its dotted key (``prefix`` before each)."""
    flat: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, Mapping):
            flat.update(flat_keys(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
