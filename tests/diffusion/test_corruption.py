"""Exact properties of the corruption kernels: counts, subsets, p_mask, seeding, errors.

Distributional properties (levels, position bias, uniformity) live in test_corruption_stats.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from xdllm.diffusion import (
    corrupt_blockwise,
    corrupt_uniform,
    corrupt_uniform_random,
    corruption,
    gumbel_topk,
)
from xdllm.diffusion.corruption import _batched_gumbel_topk

MASK_ID = 0
VOCAB = 50

# (kernel, kwargs, is_mask_kernel): every kernel configuration the shared invariants run on.
KERNEL_CASES = [
    pytest.param(corrupt_uniform, {"mask_token_id": MASK_ID}, True, id="uniform"),
    pytest.param(corrupt_blockwise, {"mask_token_id": MASK_ID}, True, id="blockwise-seq"),
    pytest.param(corrupt_blockwise, {"mask_token_id": MASK_ID, "block_size": 7}, True, id="blockwise-bs7"),
    pytest.param(
        corrupt_blockwise,
        {"mask_token_id": MASK_ID, "block_size": 4, "half_life_ratio": None},
        True,
        id="blockwise-bs4-nobias",
    ),
    pytest.param(corrupt_uniform_random, {"vocab_size": VOCAB}, False, id="random-seq"),
    pytest.param(corrupt_uniform_random, {"vocab_size": VOCAB, "block_size": 5}, False, id="random-bs5"),
    pytest.param(corrupt_uniform_random, {"vocab_size": VOCAB, "block_size": 7}, False, id="random-bs7"),
]


def _batch(batch: int = 6, seq_len: int = 30, seed: int = 0, dtype=torch.long):
    """Ids that never equal MASK_ID and a loss mask with a prompt and a few holes."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (batch, seq_len), generator=g).to(dtype)
    loss_mask = torch.rand((batch, seq_len), generator=g) < 0.7
    loss_mask[:, :3] = False
    loss_mask[0] = False  # a row with nothing supervised
    return ids, loss_mask


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _scope_slices(seq_len: int, block_size: int | None) -> list[slice]:
    size = seq_len if block_size is None else block_size
    return [slice(start, min(start + size, seq_len)) for start in range(0, seq_len, size)]


# --------------------------------------------------------------------------- gumbel top-k


def test_gumbel_topk_selects_exactly_k_for_every_k():
    log_w = torch.randn(9, generator=_gen(1))
    for k in range(10):
        chosen = gumbel_topk(log_w, k, generator=_gen(k))
        assert chosen.dtype == torch.bool and chosen.shape == (9,)
        assert int(chosen.sum()) == k
    assert not gumbel_topk(log_w, 0).any()
    assert gumbel_topk(log_w, 9).all()


def test_gumbel_topk_rejects_k_out_of_range():
    log_w = torch.zeros(4)
    with pytest.raises(ValueError, match="k must be in"):
        gumbel_topk(log_w, 5)
    with pytest.raises(ValueError, match="k must be in"):
        gumbel_topk(log_w, -1)


def test_gumbel_topk_never_picks_neg_inf_while_finite_remain():
    log_w = torch.tensor([0.0, float("-inf"), 3.0, float("-inf"), -2.0, 1.0])
    finite = torch.isfinite(log_w)
    for seed in range(50):
        chosen = gumbel_topk(log_w, 4, generator=_gen(seed))
        assert torch.equal(chosen, finite)
        assert not (gumbel_topk(log_w, 2, generator=_gen(seed)) & ~finite).any()


def test_batched_gumbel_topk_equals_per_row_calls_on_the_same_draws():
    # Row-major draws make the batched call consume exactly the numbers that successive
    # per-row calls would, so the outputs must match exactly, not just in distribution.
    log_w = torch.randn(7, 11, generator=_gen(2))
    log_w[3, :5] = float("-inf")
    k = torch.tensor([0, 1, 5, 6, 11, 3, 2])
    batched = _batched_gumbel_topk(log_w, k, generator=_gen(3))
    shared = _gen(3)
    per_row = torch.stack([gumbel_topk(log_w[i], int(k[i]), generator=shared) for i in range(7)])
    assert torch.equal(batched, per_row)
    assert torch.equal(batched.sum(1), k)


def test_batched_gumbel_topk_rejects_bad_arguments():
    log_w = torch.zeros(3, 4)
    with pytest.raises(ValueError, match=r"k\[1\] = 5"):
        _batched_gumbel_topk(log_w, torch.tensor([1, 5, 0]))
    with pytest.raises(ValueError, match="k must be in"):
        _batched_gumbel_topk(log_w, torch.tensor([1, -1, 0]))
    with pytest.raises((ValueError, TypeError)):
        _batched_gumbel_topk(log_w, torch.tensor([1, 2]))
    with pytest.raises((ValueError, TypeError)):
        _batched_gumbel_topk(log_w, torch.tensor([1.0, 2.0, 0.0]))


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 6),
    dim=st.integers(1, 12),
    seed=st.integers(0, 2**31 - 1),
)
def test_batched_gumbel_topk_exact_k_and_no_neg_inf_property(rows, dim, seed):
    g = _gen(seed)
    log_w = torch.randn(rows, dim, generator=g, dtype=torch.float64)
    log_w[torch.rand(rows, dim, generator=g) < 0.3] = float("-inf")
    num_finite = torch.isfinite(log_w).sum(1)
    k = (torch.rand(rows, generator=g) * (num_finite + 1)).long().clamp(max=num_finite)
    chosen = _batched_gumbel_topk(log_w, k, generator=g)
    assert torch.equal(chosen.sum(1), k)
    assert not (chosen & ~torch.isfinite(log_w)).any()


# --------------------------------------------------------------------------- shared invariants


@pytest.mark.parametrize("kernel, kwargs, is_mask_kernel", KERNEL_CASES)
def test_only_supervised_positions_change_and_outputs_are_well_formed(kernel, kwargs, is_mask_kernel):
    ids, loss_mask = _batch(dtype=torch.int32)
    noisy, noise_mask, p_mask = kernel(ids, loss_mask, generator=_gen(5), **kwargs)
    assert noisy.dtype == torch.int32 and noisy.shape == ids.shape
    assert noise_mask.dtype == torch.bool
    assert p_mask.dtype == torch.float32 and p_mask.is_contiguous() and p_mask.stride() == (30, 1)
    assert not (noise_mask & ~loss_mask).any()
    assert torch.equal(noisy[~noise_mask], ids[~noise_mask])
    assert noise_mask.any()
    if is_mask_kernel:
        assert (noisy[noise_mask] == MASK_ID).all()
        assert torch.equal(noise_mask, noisy != ids)  # ids never equal MASK_ID
    else:
        assert ((noisy >= 0) & (noisy < VOCAB)).all()
        assert torch.equal(p_mask, torch.ones_like(p_mask))


@pytest.mark.parametrize("kernel, kwargs, is_mask_kernel", KERNEL_CASES)
def test_generator_makes_output_reproducible_and_spares_global_rng(kernel, kwargs, is_mask_kernel):
    ids, loss_mask = _batch()
    before = torch.get_rng_state()
    first = kernel(ids, loss_mask, generator=_gen(11), **kwargs)
    assert torch.equal(torch.get_rng_state(), before)
    second = kernel(ids, loss_mask, generator=_gen(11), **kwargs)
    other = kernel(ids, loss_mask, generator=_gen(12), **kwargs)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    assert not torch.equal(first[1], other[1])


@pytest.mark.parametrize("kernel, kwargs, is_mask_kernel", KERNEL_CASES)
def test_global_rng_is_used_without_generator(kernel, kwargs, is_mask_kernel):
    ids, loss_mask = _batch()
    torch.manual_seed(3)
    seeded_state = torch.get_rng_state()
    first = kernel(ids, loss_mask, **kwargs)
    assert not torch.equal(torch.get_rng_state(), seeded_state)  # the draws came from it
    torch.manual_seed(3)
    second = kernel(ids, loss_mask, **kwargs)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kernel, kwargs, is_mask_kernel", KERNEL_CASES)
def test_loss_mask_dtypes_and_none_are_equivalent(kernel, kwargs, is_mask_kernel):
    ids, loss_mask = _batch()
    reference = kernel(ids, loss_mask, generator=_gen(7), **kwargs)
    for as_dtype in (torch.int64, torch.float32, torch.uint8):
        result = kernel(ids, loss_mask.to(as_dtype), generator=_gen(7), **kwargs)
        for a, b in zip(reference, result):
            assert torch.equal(a, b)
    everything = kernel(ids, None, generator=_gen(7), **kwargs)
    all_ones = kernel(ids, torch.ones_like(loss_mask), generator=_gen(7), **kwargs)
    for a, b in zip(everything, all_ones):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kernel, kwargs, is_mask_kernel", KERNEL_CASES)
def test_empty_batch_gives_empty_outputs(kernel, kwargs, is_mask_kernel):
    ids = torch.zeros((0, 12), dtype=torch.long)
    noisy, noise_mask, p_mask = kernel(ids, None, generator=_gen(0), **kwargs)
    assert noisy.shape == noise_mask.shape == p_mask.shape == (0, 12)


@pytest.mark.parametrize("kernel, kwargs, is_mask_kernel", KERNEL_CASES)
def test_inputs_are_left_unchanged_and_outputs_are_new_tensors(kernel, kwargs, is_mask_kernel):
    ids, loss_mask = _batch(seq_len=32)
    for mask in (loss_mask, loss_mask.float(), None):
        ids_before = ids.clone()
        mask_before = None if mask is None else mask.clone()
        outputs = kernel(ids, mask, generator=_gen(2), **kwargs)
        assert torch.equal(ids, ids_before)
        assert mask is None or torch.equal(mask, mask_before)
        inputs = [ids] if mask is None else [ids, mask]
        pointers = [t.untyped_storage().data_ptr() for t in (*outputs, *inputs)]
        assert len(set(pointers)) == len(pointers)


@pytest.mark.parametrize("kernel, kwargs, is_mask_kernel", KERNEL_CASES)
def test_loss_mask_memory_layout_does_not_change_the_result(kernel, kwargs, is_mask_kernel):
    # Rows of 32 let a contiguous bool mask be combined eight bools per word; strided rows, a
    # column-major mask and one starting at an odd byte offset take the element-wise path.
    ids, loss_mask = _batch(seq_len=32)
    wide = torch.zeros(ids.shape[0], 35, dtype=torch.bool)
    wide[:, 3:] = loss_mask
    shifted = torch.cat([torch.zeros(1, dtype=torch.bool), loss_mask.flatten()])[1:].view_as(loss_mask)
    expected = kernel(ids, loss_mask, generator=_gen(8), **kwargs)
    for layout in (wide[:, 3:], loss_mask.t().contiguous().t(), shifted):
        result = kernel(ids, layout, generator=_gen(8), **kwargs)
        assert all(torch.equal(a, b) for a, b in zip(expected, result))


# --------------------------------------------------------------------------- draw for draw
# Direct implementations of the formulas, making the same generator calls in the same order
# and shapes as the kernels: the kernels must reproduce them bit for bit, so an optimisation
# of a kernel can never silently change the noise a seed gives.


def _direct_uniform(ids, loss_mask, generator, eps=1e-3):
    batch, seq_len = ids.shape
    p = eps + (1 - eps) * torch.rand((batch, 1), generator=generator)
    noise = (torch.rand((batch, seq_len), generator=generator) < p) & loss_mask
    return torch.where(noise, MASK_ID, ids), noise, p.expand(batch, seq_len)


def _direct_uniform_random(ids, loss_mask, generator, block_size, eps=1e-3):
    batch, seq_len = ids.shape
    size = seq_len if block_size is None else block_size
    scopes = _scope_slices(seq_len, block_size)
    t = eps + (1 - eps) * torch.rand((batch, len(scopes)), generator=generator)
    level = t.repeat_interleave(size, dim=1)[:, :seq_len]
    noise = (torch.rand((batch, seq_len), generator=generator) < level) & loss_mask
    tokens = torch.randint(0, VOCAB, (batch, seq_len), generator=generator, dtype=ids.dtype)
    return torch.where(noise, tokens, ids), noise, torch.ones(batch, seq_len)


def _direct_blockwise(ids, loss_mask, generator, block_size, half_life_ratio=0.25, eps=1e-3):
    batch, seq_len = ids.shape
    size = seq_len if block_size is None else block_size
    scopes = _scope_slices(seq_len, block_size)
    rows = batch * len(scopes)
    supervised = torch.zeros(rows, size, dtype=torch.bool)
    lengths = torch.tensor([s.stop - s.start for s in scopes] * batch)
    for j, scope in enumerate(scopes):
        supervised[j :: len(scopes), : lengths[j]] = loss_mask[:, scope]
    n = supervised.sum(1)
    m = eps + (1 - eps) * torch.rand(rows, generator=generator)
    k = torch.round(m * n).long()
    if block_size is None:
        k = torch.maximum(k, (n > 0).long())
    k = torch.minimum(k, n)
    lam = math.log(2) / (half_life_ratio * lengths.float())
    log_w = (lam * (1 - m))[:, None] * torch.arange(size, dtype=torch.float32)
    log_w[~supervised] = float("-inf")
    u = torch.rand((rows, size), generator=generator).clamp(min=torch.finfo(torch.float32).tiny)
    order = torch.sort(log_w - torch.log(-torch.log(u)), dim=1, descending=True).indices
    picked = torch.arange(size).expand(rows, size) < k[:, None]
    chosen = torch.zeros(rows, size, dtype=torch.bool).scatter_(1, order, picked)
    noise = chosen.view(batch, -1)[:, :seq_len]
    p_mask = m.view(batch, -1).repeat_interleave(size, dim=1)[:, :seq_len]
    return torch.where(noise, MASK_ID, ids), noise, p_mask


@pytest.mark.parametrize("block_size", [None, 1, 4, 5, 7, 8, 40])
@pytest.mark.parametrize("seq_len", [24, 30])
def test_kernels_reproduce_the_direct_formulas_draw_for_draw(block_size, seq_len):
    ids, loss_mask = _batch(seq_len=seq_len)
    pairs = [
        (corrupt_uniform_random(ids, loss_mask, VOCAB, block_size=block_size, generator=_gen(6)),
         _direct_uniform_random(ids, loss_mask, _gen(6), block_size)),
        (corrupt_blockwise(ids, loss_mask, MASK_ID, block_size=block_size, generator=_gen(6)),
         _direct_blockwise(ids, loss_mask, _gen(6), block_size)),
    ]
    if block_size is None:
        pairs.append((corrupt_uniform(ids, loss_mask, MASK_ID, generator=_gen(6)),
                      _direct_uniform(ids, loss_mask, _gen(6))))
    for ours, direct in pairs:
        for a, b in zip(ours, direct):
            assert a.dtype == b.dtype and torch.equal(a, b)


# --------------------------------------------------------------------------- corrupt_uniform


def test_corrupt_uniform_p_mask_is_the_row_level_on_every_position():
    ids, loss_mask = _batch()
    _, _, p_mask = corrupt_uniform(ids, loss_mask, MASK_ID, eps=0.2, generator=_gen(4))
    assert torch.equal(p_mask, p_mask[:, :1].expand_as(p_mask))
    # p = (1 - eps) * t + eps with t the generator's first draw for each row.
    t = torch.rand(6, generator=_gen(4))
    torch.testing.assert_close(p_mask[:, 0], 0.8 * t + 0.2)


# --------------------------------------------------------------------------- corrupt_blockwise


def _fixed_levels(monkeypatch, values):
    """Make the kernels draw exactly ``values`` (row-major) as their levels."""
    levels = torch.tensor(values, dtype=torch.float32)

    def draw(shape, eps, generator, device):
        assert math.prod(shape) == levels.numel(), f"expected {math.prod(shape)} levels"
        return levels.reshape(shape).to(device)

    monkeypatch.setattr(corruption, "_draw_levels", draw)


def test_blockwise_k_per_sequence_matches_hand_computed_counts(monkeypatch):
    ids = torch.arange(1, 17).repeat(4, 1)
    loss_mask = torch.zeros(4, 16, dtype=torch.bool)
    loss_mask[:3, 6:] = True  # n = 10 supervised in rows 0..2, none in row 3
    # round(0.3*10)=3; round(0.01*10)=0 clamped up to 1; round(0.96*10)=10; n=0 -> 0.
    _fixed_levels(monkeypatch, [0.3, 0.01, 0.96, 0.5])
    _, noise_mask, p_mask = corrupt_blockwise(ids, loss_mask, MASK_ID, generator=_gen(0))
    assert noise_mask.sum(1).tolist() == [3, 1, 10, 0]
    torch.testing.assert_close(p_mask[:, 5], torch.tensor([0.3, 0.01, 0.96, 0.5]))


def test_blockwise_k_per_block_matches_hand_computed_counts(monkeypatch):
    # L = 20, block_size = 8: blocks [0, 8), [8, 16), [16, 20) (last one shorter).
    ids = torch.arange(1, 21).unsqueeze(0)
    loss_mask = torch.zeros(1, 20, dtype=torch.bool)
    loss_mask[0, 3:8] = True  # n = 5
    loss_mask[0, 8:11] = True  # n = 3
    loss_mask[0, 16:20] = True  # n = 4
    # round(0.26*5)=1; round(0.01*3)=0 (no clamp per block); round(0.6*4)=2.
    _fixed_levels(monkeypatch, [0.26, 0.01, 0.6])
    _, noise_mask, p_mask = corrupt_blockwise(ids, loss_mask, MASK_ID, block_size=8, generator=_gen(0))
    counts = [int(noise_mask[0, s].sum()) for s in _scope_slices(20, 8)]
    assert counts == [1, 0, 2]
    expected_p = torch.tensor([0.26] * 8 + [0.01] * 8 + [0.6] * 4).unsqueeze(0)
    torch.testing.assert_close(p_mask, expected_p)


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 4),
    seq_len=st.integers(1, 40),
    block_size=st.one_of(st.none(), st.integers(1, 16)),
    supervised_fraction=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_blockwise_masks_round_m_n_supervised_positions_per_scope(
    batch, seq_len, block_size, supervised_fraction, seed
):
    g = _gen(seed)
    ids = torch.randint(1, VOCAB, (batch, seq_len), generator=g)
    loss_mask = torch.rand(batch, seq_len, generator=g) < supervised_fraction
    noisy, noise_mask, p_mask = corrupt_blockwise(ids, loss_mask, MASK_ID, block_size=block_size, generator=g)
    assert not (noise_mask & ~loss_mask).any()
    assert torch.equal(noise_mask, noisy != ids)
    for row in range(batch):
        for scope in _scope_slices(seq_len, block_size):
            level = p_mask[row, scope]
            assert torch.all(level == level[0])
            assert 1e-3 <= float(level[0]) < 1.0
            n = int(loss_mask[row, scope].sum())
            k = int(torch.round(level[0] * n))
            if block_size is None and n > 0:
                k = max(k, 1)
            assert int(noise_mask[row, scope].sum()) == min(k, n)


def test_blockwise_levels_differ_between_blocks_of_a_row():
    ids, loss_mask = _batch(batch=2, seq_len=32)
    _, _, p_mask = corrupt_blockwise(ids, loss_mask, MASK_ID, block_size=8, generator=_gen(9))
    per_block = p_mask[:, ::8]
    assert torch.equal(p_mask, per_block.repeat_interleave(8, dim=1))
    assert per_block.unique().numel() == 8


# --------------------------------------------------------------------------- corrupt_uniform_random


def test_uniform_random_with_one_token_vocabulary_writes_token_zero():
    ids, loss_mask = _batch()
    noisy, noise_mask, _ = corrupt_uniform_random(ids, loss_mask, vocab_size=1, generator=_gen(3))
    assert noise_mask.any()
    assert (noisy[noise_mask] == 0).all()


def test_uniform_random_marks_replacements_that_drew_the_same_token():
    ids = torch.ones((64, 64), dtype=torch.long)
    noisy, noise_mask, _ = corrupt_uniform_random(ids, None, vocab_size=2, generator=_gen(3))
    kept_value = noise_mask & (noisy == ids)
    assert kept_value.any()  # noise_mask is the draw, not "the value changed"
    assert torch.equal(noise_mask | (noisy == ids), torch.ones_like(noise_mask))


# --------------------------------------------------------------------------- errors


def test_supervised_positions_rejects_mismatched_loss_mask():
    with pytest.raises(ValueError, match=r"loss_mask shape \(2, 5\) does not match input_ids shape \(2, 6\)"):
        corruption._supervised_positions(torch.zeros(2, 6, dtype=torch.long), torch.ones(2, 5), "kernel")
    with pytest.raises(ValueError, match=r"input_ids must be \[batch, seq_len\]"):
        corruption._supervised_positions(torch.zeros(6, dtype=torch.long), None, "kernel")
    with pytest.raises(ValueError, match="integer tensor"):
        corruption._supervised_positions(torch.zeros(2, 6), None, "kernel")


@pytest.mark.parametrize("kernel, kwargs, is_mask_kernel", KERNEL_CASES)
def test_kernels_reject_mismatched_shapes(kernel, kwargs, is_mask_kernel):
    # Under the jaxtyping test hook the shape annotation fires first (a TypeError subclass);
    # without it the kernel's own ValueError does. Either names loss_mask.
    with pytest.raises((ValueError, TypeError), match="loss_mask"):
        kernel(torch.zeros(2, 6, dtype=torch.long), torch.ones(2, 5), **kwargs)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda ids: corrupt_uniform(ids, None, MASK_ID, eps=1.0), "eps must be in"),
        (lambda ids: corrupt_uniform(ids, None, MASK_ID, eps=-0.1), "eps must be in"),
        (lambda ids: corrupt_blockwise(ids, None, MASK_ID, eps=1.5), "eps must be in"),
        (lambda ids: corrupt_blockwise(ids, None, MASK_ID, block_size=0), "block_size must be >= 1"),
        (lambda ids: corrupt_blockwise(ids, None, MASK_ID, half_life_ratio=0.0), "half_life_ratio"),
        (lambda ids: corrupt_blockwise(ids.to(torch.int8), None, 300), "mask_token_id = 300"),
        (lambda ids: corrupt_uniform(ids, None, -1), "mask_token_id = -1"),
        (lambda ids: corrupt_uniform_random(ids, None, 0), "vocab_size must be >= 1"),
        (lambda ids: corrupt_uniform_random(ids, None, 10, block_size=-2), "block_size must be >= 1"),
        (lambda ids: corrupt_uniform_random(ids.to(torch.uint8), None, 1000), "vocab_size - 1"),
        (lambda ids: corrupt_uniform_random(ids, None, 10, eps=1.0), "eps must be in"),
    ],
)
def test_kernels_reject_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call(torch.ones(2, 8, dtype=torch.long))


def test_a_non_contiguous_loss_mask_is_accepted():
    ids = torch.arange(24).reshape(2, 12) + 5
    mask_t = torch.ones(12, 2, dtype=torch.bool).t()  # a transposed view: not contiguous
    assert not mask_t.is_contiguous()
    dense = corrupt_blockwise(ids, mask_t.contiguous(), 1, block_size=4,
                              generator=torch.Generator().manual_seed(0))
    strided = corrupt_blockwise(ids, mask_t, 1, block_size=4,
                                generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(dense, strided))
