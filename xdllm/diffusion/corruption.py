"""Corruption kernels for diffusion-LM training (semantics and speed: docs/corruption.md).

Each kernel turns clean ``input_ids`` into a noisy canvas and returns
``(noisy_input_ids, noise_mask, p_mask)``, all ``[batch, seq_len]``:

- :func:`corrupt_uniform`: one level per sequence, each supervised token masked independently;
- :func:`corrupt_blockwise`: one level per sequence or per block, exactly ``k`` supervised
  tokens masked, chosen by Gumbel top-k with a bias toward later positions at low levels;
- :func:`corrupt_uniform_random`: one level per sequence or per block, each supervised token
  independently replaced by a uniformly random vocabulary token (D3PM-uniform).

Only supervised positions (``loss_mask`` truthy; ``None`` means all) are ever corrupted. Every
random draw comes from ``generator`` when one is given, so a seeded generator makes the noise
reproducible and leaves the global RNG untouched. Kernels are vectorised over rows and blocks.

The kernels run once per batch, in the data path, on tensors of a few hundred thousand
elements, where a pass over memory costs more than the arithmetic in it. So they make as few
``[batch, seq_len]`` passes and allocations as the formulas allow: arguments are checked by
shape and dtype only (never a value, which would cost a host sync), per-scope levels are
compared through broadcast views and spread to positions by one index lookup, buffers whose
contents are spent are reused for the outputs, and in-place steps replace temporaries.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Float32, Integer, Shaped
from torch import Tensor

CorruptionOutput = tuple[
    Integer[Tensor, "batch seq_len"], Bool[Tensor, "batch seq_len"], Float32[Tensor, "batch seq_len"]
]


# --------------------------------------------------------------------------- argument checks


def _supervised_positions(
    input_ids: Tensor, loss_mask: Tensor | None, where: str
) -> Bool[Tensor, "batch seq_len"] | None:
    """``loss_mask`` as a bool tensor, or None when every position is supervised (``loss_mask=None``).

    Checks shapes, dtypes and devices only: no value is read, so nothing waits on the device.
    """
    if input_ids.dim() != 2:
        raise ValueError(f"{where}: input_ids must be [batch, seq_len], got shape {tuple(input_ids.shape)}")
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise ValueError(f"{where}: input_ids must be an integer tensor, got {input_ids.dtype}")
    if loss_mask is None:
        return None
    if loss_mask.shape != input_ids.shape:
        raise ValueError(
            f"{where}: loss_mask shape {tuple(loss_mask.shape)} does not match "
            f"input_ids shape {tuple(input_ids.shape)}"
        )
    if loss_mask.device != input_ids.device:
        raise ValueError(f"{where}: loss_mask is on {loss_mask.device}, input_ids on {input_ids.device}")
    return loss_mask if loss_mask.dtype == torch.bool else loss_mask.bool()


def _check_eps(eps: float, where: str) -> None:
    if not 0.0 <= eps < 1.0:
        raise ValueError(f"{where}: eps must be in [0, 1), got {eps}")


def _check_block_size(block_size: int | None, where: str) -> None:
    if block_size is not None and block_size < 1:
        raise ValueError(f"{where}: block_size must be >= 1 or None, got {block_size}")


def _check_token_fits(token_id: int, input_ids: Tensor, name: str, where: str) -> None:
    """A token written into the canvas must be representable in the ids' dtype."""
    info = torch.iinfo(input_ids.dtype)
    if not 0 <= token_id <= info.max:
        raise ValueError(f"{where}: {name} = {token_id} does not fit input_ids dtype {input_ids.dtype}")


def _check_generator(generator: torch.Generator | None, device: torch.device, where: str) -> None:
    if generator is not None and generator.device.type != device.type:
        raise ValueError(f"{where}: generator is on {generator.device}, tensors on {device}")


# --------------------------------------------------------------------------- random draws


def _draw_levels(
    shape: tuple[int, ...], eps: float, generator: torch.Generator | None, device: torch.device
) -> Float32[Tensor, "..."]:
    """Corruption levels ``eps + (1 - eps) * U[0, 1)``: in ``[eps, 1)``, float32."""
    uniform = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
    return uniform.mul_(1.0 - eps).add_(eps)


def _negated_gumbel_noise(
    shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """``log(-log U)``, minus a standard Gumbel draw, computed in place in the draws' buffer.

    U is kept off 0 so every draw is finite. Callers subtract it: ``x - log(-log U)`` is exactly
    ``x + Gumbel`` (IEEE subtraction is addition of the negation) with one pass fewer.
    """
    uniform = torch.rand(shape, generator=generator, device=device, dtype=dtype)
    return uniform.clamp_(min=torch.finfo(dtype).tiny).log_().neg_().log_()


def _gumbel_keys(log_w: Float[Tensor, "*shape"], generator: torch.Generator | None) -> Float[Tensor, "*shape"]:
    """``log_w + Gumbel`` noise, in a new tensor (``log_w`` is left as it is)."""
    noise = _negated_gumbel_noise(tuple(log_w.shape), log_w.dtype, generator, log_w.device)
    return torch.sub(log_w, noise, out=noise)


def _gumbel_topk_rows(
    log_w: Float[Tensor, "rows dim"], k: Integer[Tensor, " rows"], generator: torch.Generator | None
) -> Bool[Tensor, "rows dim"]:
    """Unchecked core of :func:`_batched_gumbel_topk` (kernels guarantee ``0 <= k <= dim``).

    Ranks each row by ``log_w + Gumbel`` with one sort, marks the first ``k[i]`` ranks and
    scatters the marks back to their positions; no host sync. The ranking is a permutation of
    every row, so the scatter writes every position and needs no zero-filled target.
    """
    order = _gumbel_keys(log_w, generator).argsort(dim=1, descending=True)
    ranks = torch.arange(log_w.shape[1], device=log_w.device)
    picked_in_order = ranks.unsqueeze(0) < k.unsqueeze(1)
    return torch.empty_like(picked_in_order).scatter_(1, order, picked_in_order)


# --------------------------------------------------------------------------- Gumbel top-k


def gumbel_topk(
    log_w: Float[Tensor, " dim"], k: int, generator: torch.Generator | None = None
) -> Bool[Tensor, " dim"]:
    """Exactly ``k`` positions of ``log_w``, sampled without replacement with weights ``exp(log_w)``.

    The Gumbel-max trick: the ``k`` largest of ``log_w + Gumbel`` noise. ``-inf`` entries are
    never picked while finite ones remain. ``k = 0`` gives all False; ``k`` outside
    ``[0, len(log_w)]`` is a ``ValueError``.
    """
    if log_w.dim() != 1:
        raise ValueError(f"gumbel_topk: log_w must be 1-D, got shape {tuple(log_w.shape)}")
    if not 0 <= k <= log_w.shape[0]:
        raise ValueError(f"gumbel_topk: k must be in [0, {log_w.shape[0]}] (len(log_w)), got {k}")
    _check_generator(generator, log_w.device, "gumbel_topk")
    chosen = torch.zeros(log_w.shape, dtype=torch.bool, device=log_w.device)
    chosen[torch.topk(_gumbel_keys(log_w, generator), k).indices] = True
    return chosen


def _batched_gumbel_topk(
    log_w: Float[Tensor, "rows dim"], k: Integer[Tensor, " rows"], generator: torch.Generator | None = None
) -> Bool[Tensor, "rows dim"]:
    """Row ``i`` gets exactly ``k[i]`` positions, the ``k[i]`` largest of ``log_w[i] + Gumbel``.

    The vectorised form of :func:`gumbel_topk` applied to each row (same distribution; with the
    same generator state even the same draws). Checks ``0 <= k <= dim``, which costs one host
    sync; the kernels call the unchecked core instead.
    """
    if log_w.dim() != 2:
        raise ValueError(f"_batched_gumbel_topk: log_w must be [rows, dim], got shape {tuple(log_w.shape)}")
    if k.dim() != 1 or k.shape[0] != log_w.shape[0]:
        raise ValueError(
            f"_batched_gumbel_topk: k must have shape [{log_w.shape[0]}] (one count per row of "
            f"log_w), got {tuple(k.shape)}"
        )
    if k.is_floating_point() or k.dtype == torch.bool:
        raise ValueError(f"_batched_gumbel_topk: k must be an integer tensor, got {k.dtype}")
    dim = log_w.shape[1]
    out_of_range = (k < 0) | (k > dim)
    if bool(out_of_range.any()):
        row = int(out_of_range.nonzero()[0, 0])
        raise ValueError(
            f"_batched_gumbel_topk: k must be in [0, {dim}] (row length), got k[{row}] = {int(k[row])}"
        )
    _check_generator(generator, log_w.device, "_batched_gumbel_topk")
    return _gumbel_topk_rows(log_w, k, generator)


# --------------------------------------------------------------------------- scopes


def _num_scopes(seq_len: int, block_size: int | None) -> tuple[int, int]:
    """``(scope_len, num_scopes)`` per row: the whole row, or ``ceil(seq_len / block_size)`` blocks."""
    if block_size is None:
        return max(seq_len, 1), 1
    return block_size, math.ceil(seq_len / block_size)


def _scope_lengths(seq_len: int, scope_len: int, num_scopes: int, device: torch.device) -> Tensor:
    """Real length of each scope of a row: ``scope_len``, except a shorter last block."""
    starts = torch.arange(num_scopes, device=device) * scope_len
    return (seq_len - starts).clamp(max=scope_len)


def _spread_over_scopes(
    per_scope: Float32[Tensor, "batch num_scopes"],
    scope_len: int,
    seq_len: int,
    out: Float32[Tensor, "batch seq_len"] | None = None,
) -> Float32[Tensor, "batch seq_len"]:
    """Each scope's value on every position of that scope, as a contiguous ``[batch, seq_len]``.

    One ``index_select`` of the small per-scope tensor by each position's scope: a shorter last
    block needs no special case, no ``[batch, num_scopes, scope_len]`` expansion is copied, and
    torch runs the lookup on the calling thread (a broadcast copy this size goes to its worker
    threads, whose wake-up can cost more than the copy). Written into ``out`` when given, so a
    spent buffer can be reused.
    """
    scope_of_position = torch.arange(seq_len, device=per_scope.device) // scope_len
    return torch.index_select(per_scope, 1, scope_of_position, out=out)


def _below_scope_levels(
    draws: Float32[Tensor, "batch seq_len"], levels: Float32[Tensor, "batch num_scopes"], scope_len: int
) -> Bool[Tensor, "batch seq_len"]:
    """``draws[b, i] < levels[b, scope of i]``.

    When the scopes tile the row exactly, the draws are viewed as ``[batch, num_scopes,
    scope_len]`` and compared with the levels broadcast along the scope, so the levels are
    never copied out to every position.
    """
    batch, seq_len = draws.shape
    num_scopes = levels.shape[1]
    if num_scopes * scope_len != seq_len:
        return draws < _spread_over_scopes(levels, scope_len, seq_len)
    below = draws.view(batch, num_scopes, scope_len) < levels.unsqueeze(2)
    return below.view(batch, seq_len)


def _and_in_place(
    mask: Bool[Tensor, "batch seq_len"], other: Bool[Tensor, "batch seq_len"] | None
) -> Bool[Tensor, "batch seq_len"]:
    """``mask &= other`` (``other=None`` means all True), returning ``mask`` (fresh and contiguous).

    A bool is one byte holding 0 or 1, so when ``other`` is contiguous, word-aligned and the
    size a multiple of 8, the AND runs on int64 views: one eighth of the elements, few enough
    that torch does it on the calling thread instead of handing it to its worker threads (whose
    wake-up, on a busy host, costs more than the AND itself).
    """
    if other is None:
        return mask
    if other.is_contiguous() and other.storage_offset() % 8 == 0 and mask.numel() % 8 == 0:
        mask.view(-1).view(torch.int64).bitwise_and_(other.view(-1).view(torch.int64))
    else:
        mask.bitwise_and_(other)
    return mask


def _scope_rows(
    supervised: Bool[Tensor, "batch seq_len"], scope_len: int, num_scopes: int
) -> Bool[Tensor, "rows scope_len"]:
    """One row per scope; positions past the end of a shorter last block are unsupervised."""
    batch, seq_len = supervised.shape
    padding = scope_len * num_scopes - seq_len
    if padding:
        supervised = F.pad(supervised, (0, padding))
    return supervised.reshape(batch * num_scopes, scope_len)


def _log_weights(
    levels: Float32[Tensor, " rows"],
    row_lengths: Integer[Tensor, " rows"],
    scope_len: int,
    half_life_ratio: float | None,
) -> Float32[Tensor, "rows scope_len"]:
    """``log w_i = lam (1 - m) i`` per scope row, ``lam = ln 2 / (half_life_ratio S)``; zeros if no bias."""
    if half_life_ratio is None:
        return torch.zeros((levels.shape[0], scope_len), device=levels.device)
    lam = math.log(2.0) / (half_life_ratio * row_lengths.clamp(min=1).float())
    offsets = torch.arange(scope_len, device=levels.device, dtype=torch.float32)
    return (lam * (1.0 - levels)).unsqueeze(1) * offsets


# --------------------------------------------------------------------------- kernels


def corrupt_uniform(
    input_ids: Integer[Tensor, "batch seq_len"],
    loss_mask: Shaped[Tensor, "batch seq_len"] | None,
    mask_token_id: int,
    eps: float = 1e-3,
    generator: torch.Generator | None = None,
) -> CorruptionOutput:
    """Per-sequence absorbing corruption (MDLM).

    Each row draws ``t ~ U[0, 1)`` and ``p = (1 - eps) * t + eps``; every supervised token
    becomes ``mask_token_id`` independently with probability ``p``. ``p_mask`` holds ``p`` on
    every position of the row.
    """
    where = "corrupt_uniform"
    supervised = _supervised_positions(input_ids, loss_mask, where)
    _check_eps(eps, where)
    _check_token_fits(mask_token_id, input_ids, "mask_token_id", where)
    _check_generator(generator, input_ids.device, where)
    batch, seq_len = input_ids.shape
    levels = _draw_levels((batch, 1), eps, generator, input_ids.device)
    draws = torch.rand((batch, seq_len), generator=generator, device=input_ids.device)
    noise_mask = _and_in_place(draws < levels, supervised)
    noisy = torch.where(noise_mask, mask_token_id, input_ids)
    p_mask = _spread_over_scopes(levels, max(seq_len, 1), seq_len, out=draws)  # the draws are spent
    return noisy, noise_mask, p_mask


def corrupt_blockwise(
    input_ids: Integer[Tensor, "batch seq_len"],
    loss_mask: Shaped[Tensor, "batch seq_len"] | None,
    mask_token_id: int,
    block_size: int | None = None,
    eps: float = 1e-3,
    half_life_ratio: float | None = 0.25,
    generator: torch.Generator | None = None,
) -> CorruptionOutput:
    """Exact-``k`` absorbing corruption, per sequence or per block, with a late-position bias.

    Scope: the whole row (``block_size=None``) or each contiguous block of ``block_size``
    positions (the last block may be shorter). Per scope of real length ``S`` with ``n``
    supervised positions: level ``m ~ U(eps, 1)``, ``k = round(m * n)`` clamped to ``[0, n]``
    (and to at least 1 when ``n > 0`` in the per-sequence path). Exactly ``k`` supervised
    positions are masked, by Gumbel top-k on ``log w_i = lam * (1 - m) * i`` with
    ``lam = ln 2 / (half_life_ratio * S)`` and ``i`` the offset inside the scope: at small ``m``
    the weight doubles every ``half_life_ratio * S / (1 - m)`` positions, at ``m -> 1`` the
    choice is uniform; ``half_life_ratio=None`` means no bias. ``p_mask`` holds the scope's ``m``.
    """
    where = "corrupt_blockwise"
    supervised = _supervised_positions(input_ids, loss_mask, where)
    _check_eps(eps, where)
    _check_block_size(block_size, where)
    if half_life_ratio is not None and not half_life_ratio > 0:
        raise ValueError(f"{where}: half_life_ratio must be > 0 or None, got {half_life_ratio}")
    _check_token_fits(mask_token_id, input_ids, "mask_token_id", where)
    _check_generator(generator, input_ids.device, where)
    device = input_ids.device
    batch, seq_len = input_ids.shape
    scope_len, num_scopes = _num_scopes(seq_len, block_size)
    padded_len = scope_len * num_scopes
    row_lengths = _scope_lengths(seq_len, scope_len, num_scopes, device).repeat(batch)
    if supervised is None and padded_len != seq_len:
        supervised = torch.ones((batch, seq_len), dtype=torch.bool, device=device)  # to exclude the padding
    # One row per scope; padding past seq_len is unsupervised, so it is never picked.
    supervised_rows = None if supervised is None else _scope_rows(supervised, scope_len, num_scopes)
    num_supervised = row_lengths if supervised_rows is None else supervised_rows.sum(dim=1)

    levels = _draw_levels((batch * num_scopes,), eps, generator, device)
    num_masked = torch.round(levels * num_supervised).long()
    if block_size is None:
        num_masked = num_masked.clamp(min=num_supervised.clamp(max=1))
    num_masked = torch.minimum(num_masked, num_supervised)

    log_w = _log_weights(levels, row_lengths, scope_len, half_life_ratio)
    if supervised_rows is not None:
        log_w = torch.where(supervised_rows, log_w, float("-inf"))
    chosen = _gumbel_topk_rows(log_w, num_masked, generator)

    noise_mask = chosen.view(batch, padded_len)[:, :seq_len].contiguous()
    noisy = torch.where(noise_mask, mask_token_id, input_ids)
    spent = log_w.view(batch, padded_len) if padded_len == seq_len else None  # reuse the weights' buffer
    p_mask = _spread_over_scopes(levels.view(batch, num_scopes), scope_len, seq_len, out=spent)
    return noisy, noise_mask, p_mask


def corrupt_uniform_random(
    input_ids: Integer[Tensor, "batch seq_len"],
    loss_mask: Shaped[Tensor, "batch seq_len"] | None,
    vocab_size: int,
    block_size: int | None = None,
    eps: float = 1e-3,
    generator: torch.Generator | None = None,
) -> CorruptionOutput:
    """Uniform random-token corruption (D3PM-uniform), per sequence or per block.

    Each scope draws ``t ~ U(eps, 1)``; every supervised token in it is independently replaced,
    with probability ``t``, by a token drawn uniformly from ``[0, vocab_size)`` (possibly its own
    value; ``noise_mask`` still marks it). No mask token. ``p_mask`` is all ones: the matching
    loss is a flat mean with no ``1/t`` weight.
    """
    where = "corrupt_uniform_random"
    supervised = _supervised_positions(input_ids, loss_mask, where)
    _check_eps(eps, where)
    _check_block_size(block_size, where)
    if vocab_size < 1:
        raise ValueError(f"{where}: vocab_size must be >= 1, got {vocab_size}")
    _check_token_fits(vocab_size - 1, input_ids, "vocab_size - 1 (largest replacement id)", where)
    _check_generator(generator, input_ids.device, where)
    device = input_ids.device
    batch, seq_len = input_ids.shape
    scope_len, num_scopes = _num_scopes(seq_len, block_size)

    levels = _draw_levels((batch, num_scopes), eps, generator, device)
    draws = torch.rand((batch, seq_len), generator=generator, device=device)
    noise_mask = _and_in_place(_below_scope_levels(draws, levels, scope_len), supervised)
    replacements = torch.randint(
        0, vocab_size, (batch, seq_len), generator=generator, device=device, dtype=input_ids.dtype
    )
    noisy = torch.where(noise_mask, replacements, input_ids, out=replacements)  # replacements are spent
    p_mask = draws.fill_(1.0)  # so are the draws
    return noisy, noise_mask, p_mask
