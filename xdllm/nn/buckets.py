"""A few fixed shapes for compiled FlexAttention, so new batch widths do not recompile it.

Compiled ``flex_attention`` is specialised to the exact shape it sees: every new number of rows
or row width compiles it again, and past dynamo's recompile limit (8) it falls back to an
unfused path that materialises the whole score matrix. So a forward through flex is padded to
a *bucket*: rows to a power of two up to 8, then to a multiple of 8 (:data:`ROW_STEP`); the
width to a power of two from 16 up to 128, then to a multiple of 128 (:data:`WIDTH_STEP`,
flex's tile). A run compiles attention at most once per bucket it meets, whatever its
batches; the padding costs at most a factor 2 on small shapes and one step on large ones.

The added rows and columns form a document of their own (:data:`BUCKET_PAD_DOCUMENT_ID`): no
real token or padding token attends them and they attend only each other, so the outputs at the
original positions are those of the unpadded forward, which are then cut back out. Widths are
multiples of 16: on the CPU, torch 2.13's compiled flex gives wrong rows at lengths of 8
modulo 16.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

MIN_BUCKET_WIDTH = 16
ROW_STEP = 8
WIDTH_STEP = 128
SHAPE_LIMIT = 64
"""Compiled shapes of one function kept before dynamo gives up on it (its default, 8, is below
the number of buckets a run whose rows shrink, such as generation, can meet)."""
BUCKET_PAD_DOCUMENT_ID = -2
"""Document id of the rows and columns a bucket adds (padding tokens keep ``PAD_DOCUMENT_ID``)."""


def bucket(size: int, step: int, minimum: int = 1) -> int:
    """``size`` rounded up to a power of two (at least ``minimum``) while that is at most
    ``step`` (a power of two), else to a multiple of ``step``."""
    if size > step:
        return -(-size // step) * step
    return 1 << (max(size, minimum) - 1).bit_length()


def bucket_shape(rows: int, width: int) -> tuple[int, int]:
    """The padded ``(rows, width)`` of a flex forward over ``rows x width`` tokens."""
    return bucket(rows, ROW_STEP), bucket(width, WIDTH_STEP, MIN_BUCKET_WIDTH)


def pad_to(values: Tensor, shape: tuple[int, int], fill: int | float | bool) -> Tensor:
    """``values [rows, width, ...]`` padded at the end of both dimensions to ``shape``."""
    rows, width = values.shape[:2]
    if (rows, width) == shape:
        return values
    trailing = [0, 0] * (values.dim() - 2)
    return F.pad(values, [*trailing, 0, shape[1] - width, 0, shape[0] - rows], value=fill)


def pad_tokens(tokens: tuple, shape: tuple[int, int]) -> tuple:
    """A rule's per-token attributes (document first, as every ``Tokens`` type has them) padded
    to ``shape``: the new slots in :data:`BUCKET_PAD_DOCUMENT_ID`, other attributes zero."""
    document, *others = tokens
    return type(tokens)(pad_to(document, shape, BUCKET_PAD_DOCUMENT_ID),
                        *(pad_to(field, shape, False if field.dtype == torch.bool else 0) for field in others))


def allow_shape_buckets() -> None:
    """Raise dynamo's recompile limit to at least :data:`SHAPE_LIMIT`, once, when xdllm first
    compiles something (a context around every call would cost more than a small forward).
    It is process-wide: other compiled code may then also keep up to that many shapes."""
    import torch._dynamo  # here, not at import: it takes a second to load, and only compiling needs it

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, SHAPE_LIMIT)
