"""Per-sample seeded corruption does not depend on how a global batch is split across ranks.

Each simulated rank corrupts its slice with the global sample indices of its rows; every sample
must get the same noise as when one rank holds the whole batch, for every kernel.
"""

from __future__ import annotations

import pytest
import torch

from xdllm.diffusion import (
    corrupt_blockwise,
    corrupt_per_sample,
    corrupt_uniform,
    corrupt_uniform_random,
    sample_generators,
)

GLOBAL_BATCH, SEQ_LEN, BASE_SEED = 32, 40, 1234

KERNELS = [
    pytest.param(corrupt_uniform, {"mask_token_id": 0}, id="uniform"),
    pytest.param(corrupt_blockwise, {"mask_token_id": 0, "block_size": 8}, id="blockwise"),
    pytest.param(corrupt_uniform_random, {"vocab_size": 97, "block_size": 8}, id="uniform_random"),
]


def _global_batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 97, (GLOBAL_BATCH, SEQ_LEN), generator=g)
    loss_mask = (torch.rand(GLOBAL_BATCH, SEQ_LEN, generator=g) < 0.8).float()
    return ids, loss_mask


def _corrupt_rows(kernel, kwargs, ids, loss_mask, rows, step):
    return corrupt_per_sample(
        kernel, ids[rows], loss_mask[rows], base_seed=BASE_SEED, global_step=step, sample_indices=rows, **kwargs
    )


@pytest.mark.parametrize("kernel, kwargs", KERNELS)
@pytest.mark.parametrize("world_size", [1, 2, 4, 8])
@pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
def test_corruption_is_identical_for_any_number_of_ranks(kernel, kwargs, world_size, layout):
    ids, loss_mask = _global_batch()
    everything = list(range(GLOBAL_BATCH))
    reference = _corrupt_rows(kernel, kwargs, ids, loss_mask, everything, step=17)
    assert reference[1].any()

    per_rank = GLOBAL_BATCH // world_size
    for rank in range(world_size):
        if layout == "contiguous":
            rows = everything[rank * per_rank : (rank + 1) * per_rank]
        else:  # DistributedSampler-style: rank r holds samples r, r + world, ...
            rows = everything[rank::world_size]
        local = _corrupt_rows(kernel, kwargs, ids, loss_mask, rows, step=17)
        for local_part, reference_part in zip(local, reference):
            assert torch.equal(local_part, reference_part[rows])


@pytest.mark.parametrize("kernel, kwargs", KERNELS)
def test_another_step_gives_other_noise_and_the_same_step_repeats(kernel, kwargs):
    ids, loss_mask = _global_batch()
    rows = list(range(GLOBAL_BATCH))
    step_17 = _corrupt_rows(kernel, kwargs, ids, loss_mask, rows, step=17)
    step_18 = _corrupt_rows(kernel, kwargs, ids, loss_mask, rows, step=18)
    resumed = _corrupt_rows(kernel, kwargs, ids, loss_mask, rows, step=17)
    assert not torch.equal(step_17[1], step_18[1])
    # Almost every sample changes, not just one (a step that only shifted one row would pass above).
    changed_rows = (step_17[1] != step_18[1]).any(dim=1).sum()
    assert changed_rows >= GLOBAL_BATCH - 2
    for first, again in zip(step_17, resumed):
        assert torch.equal(first, again)


@pytest.mark.parametrize("kernel, kwargs", KERNELS)
def test_each_row_is_the_kernel_on_that_row_with_its_sample_generator(kernel, kwargs):
    ids, loss_mask = _global_batch()
    indices = torch.tensor([5, 900, 3])
    before = torch.get_rng_state()
    result = corrupt_per_sample(
        kernel, ids[:3], loss_mask[:3], base_seed=BASE_SEED, global_step=2, sample_indices=indices, **kwargs
    )
    assert torch.equal(torch.get_rng_state(), before)
    generators = sample_generators(BASE_SEED, 2, [5, 900, 3])
    for row, generator in enumerate(generators):
        expected = kernel(ids[row : row + 1], loss_mask[row : row + 1], generator=generator, **kwargs)
        for part, expected_part in zip(result, expected):
            assert torch.equal(part[row : row + 1], expected_part)


def test_corrupt_per_sample_rejects_a_generator_and_a_wrong_index_count():
    ids, loss_mask = _global_batch()
    with pytest.raises(ValueError, match="3 sample_indices and 3 global steps for a batch of 32 rows"):
        corrupt_per_sample(
            corrupt_uniform, ids, loss_mask, base_seed=0, global_step=0, sample_indices=[0, 1, 2], mask_token_id=0
        )
    with pytest.raises(ValueError, match="pass no generator"):
        corrupt_per_sample(
            corrupt_uniform,
            ids,
            loss_mask,
            base_seed=0,
            global_step=0,
            sample_indices=range(32),
            mask_token_id=0,
            generator=torch.Generator(),
        )


KERNELS_PER_SEQUENCE = KERNELS + [
    pytest.param(corrupt_blockwise, {"mask_token_id": 0}, id="blockwise-per-sequence"),
    pytest.param(corrupt_uniform_random, {"vocab_size": 97}, id="uniform_random-per-sequence"),
]


@pytest.mark.parametrize("kernel, kwargs", KERNELS_PER_SEQUENCE)
def test_padding_a_batch_wider_does_not_change_a_sample_s_noise(kernel, kwargs):
    ids, loss_mask = _global_batch()
    loss_mask[:, 30:] = 0  # content ends at 30: the batch's padded width is then free
    narrow = _corrupt_rows(kernel, kwargs, ids[:, :32], loss_mask[:, :32], list(range(8)), step=3)
    wide_ids = torch.cat([ids[:8], torch.zeros(8, 57, dtype=ids.dtype)], dim=1)
    wide_mask = torch.cat([loss_mask[:8], torch.zeros(8, 57)], dim=1)
    wide = corrupt_per_sample(kernel, wide_ids, wide_mask, base_seed=BASE_SEED, global_step=3,
                              sample_indices=list(range(8)), **kwargs)
    for narrow_part, wide_part in zip(narrow, wide):
        assert torch.equal(wide_part[:, :30], narrow_part[:, :30])
    assert torch.equal(wide[0][:, 32:], wide_ids[:, 32:]) and not wide[1][:, 30:].any()


def test_one_step_per_row_equals_one_call_per_step():
    ids, loss_mask = _global_batch()
    rows = list(range(6))
    steps = [0, 4, 4, 0, 9, 4]
    mixed = corrupt_per_sample(corrupt_uniform, ids[:6], loss_mask[:6], base_seed=BASE_SEED,
                               global_step=steps, sample_indices=rows, mask_token_id=0)
    for row, step in zip(rows, steps):
        alone = _corrupt_rows(corrupt_uniform, {"mask_token_id": 0}, ids, loss_mask, [row], step)
        assert all(torch.equal(m[row], a[0]) for m, a in zip(mixed, alone))


@pytest.mark.parametrize("kernel, kwargs", KERNELS_PER_SEQUENCE)
def test_each_row_is_its_kernel_call_over_its_extent(kernel, kwargs):
    # the definition, row by row: noise over the columns through the last supervised one (rounded
    # up to whole blocks), from the row's own seeded generator; a row with nothing supervised
    # keeps its tokens with p_mask 1; past the extent p_mask repeats its last value
    ids, loss_mask = _global_batch()
    loss_mask[:, 25:] = 0
    loss_mask[3] = 0
    loss_mask[5, 7:] = 0
    rows = list(range(8))
    noisy, noise_mask, p_mask = _corrupt_rows(kernel, kwargs, ids, loss_mask, rows, step=2)
    block = kwargs.get("block_size")
    for row, generator in zip(rows, sample_generators(BASE_SEED, 2, rows)):
        supervised = loss_mask[row].nonzero()
        if supervised.numel() == 0:
            assert torch.equal(noisy[row], ids[row]) and not noise_mask[row].any() and (p_mask[row] == 1).all()
            continue
        extent = int(supervised[-1]) + 1
        extent = min(-(-extent // block) * block, SEQ_LEN) if block else extent
        alone = kernel(ids[row:row + 1, :extent], loss_mask[row:row + 1, :extent], generator=generator, **kwargs)
        assert torch.equal(noisy[row, :extent], alone[0][0]) and torch.equal(noisy[row, extent:], ids[row, extent:])
        assert torch.equal(noise_mask[row, :extent], alone[1][0]) and not noise_mask[row, extent:].any()
        assert torch.equal(p_mask[row, :extent], alone[2][0]) and (p_mask[row, extent:] == alone[2][0, -1]).all()
