"""Counts in words, for the lines users read: ``1 step``, ``2 steps``, ``1 forward pass``; and a
long text cut, saying by how much."""


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` and ``noun``, the noun plural (``plural``, else ``noun + "s"``) unless it is 1."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def shortened(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and how many more there are."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"
