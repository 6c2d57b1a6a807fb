"""Counts in words, for the lines users read: ``1 step``, ``2 steps``, ``1 forward pass``."""


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` and ``noun``, the noun plural (``plural``, else ``noun + "s"``) unless it is 1."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
