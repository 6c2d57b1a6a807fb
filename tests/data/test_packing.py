import math
import random

import pytest
import torch

from xdllm.data.packing import PAD_SEGMENT_ID, plan_packing


def test_hand_packed_example_best_fit_decreasing():
    # Chunks by length: d3[0:6]=6, d1=5, d0=3, d3[6:9]=3, d2=2, d4=1.
    # 6 -> row 0 (full); 5 -> row 1; 3 -> row 2; 3 -> row 2 (full); 2 -> row 3;
    # 1 -> best fit is row 1 (1 free), not row 3 (4 free).
    plan = plan_packing([3, 5, 2, 9, 1], row_length=6)
    assert plan.document_ids.tolist() == [[3, 3, 3, 3, 3, 3],
                                          [1, 1, 1, 1, 1, 4],
                                          [0, 0, 0, 3, 3, 3],
                                          [2, 2, -1, -1, -1, -1]]
    assert plan.segment_ids.tolist() == [[0, 0, 0, 0, 0, 0],
                                         [0, 0, 0, 0, 0, 1],
                                         [0, 0, 0, 1, 1, 1],
                                         [0, 0, -1, -1, -1, -1]]
    assert plan.positions.tolist() == [[0, 1, 2, 3, 4, 5],
                                       [0, 1, 2, 3, 4, 0],
                                       [0, 1, 2, 0, 1, 2],
                                       [0, 1, 0, 0, 0, 0]]
    # Documents concatenated: d0 = 0..2, d1 = 3..7, d2 = 8..9, d3 = 10..18, d4 = 19.
    assert plan.source_token.tolist() == [[10, 11, 12, 13, 14, 15],
                                          [3, 4, 5, 6, 7, 19],
                                          [0, 1, 2, 16, 17, 18],
                                          [8, 9, -1, -1, -1, -1]]
    packed = plan.gather(torch.arange(20) + 100, pad_value=0)
    assert packed[3].tolist() == [108, 109, 0, 0, 0, 0]


@pytest.mark.parametrize("seed", range(5))
def test_every_token_is_placed_once_in_contiguous_restarting_segments(seed):
    rng = random.Random(seed)
    row_length = rng.choice([8, 16, 33])
    lengths = [max(1, int(rng.paretovariate(1.2) * 3)) for _ in range(rng.randint(1, 60))]
    plan = plan_packing(lengths, row_length)
    total = sum(lengths)

    placed = plan.source_token[plan.source_token >= 0]
    assert torch.equal(placed.sort().values, torch.arange(total))
    assert plan.total_tokens == total
    padding = plan.segment_ids == PAD_SEGMENT_ID
    assert torch.equal(padding, plan.source_token < 0)
    # Padding only at the end of a row; within a segment positions count up from 0 and the
    # source tokens are consecutive (document order kept).
    assert not (padding[:, :-1] & ~padding[:, 1:]).any()
    same_segment = (plan.segment_ids[:, 1:] == plan.segment_ids[:, :-1]) & ~padding[:, 1:]
    assert torch.equal(plan.positions[:, 1:][same_segment], plan.positions[:, :-1][same_segment] + 1)
    assert torch.equal(plan.source_token[:, 1:][same_segment], plan.source_token[:, :-1][same_segment] + 1)
    starts = ~same_segment & ~padding[:, 1:]
    assert (plan.positions[:, 1:][starts] == 0).all() and (plan.positions[:, 0] == 0).all()
    # Close to the lower bound on these inputs (its worst case is 11/9 of the optimum).
    lower_bound = math.ceil(total / row_length)
    assert lower_bound <= plan.num_rows <= math.ceil(11 / 9 * lower_bound) + 1


def test_long_document_is_split_into_segments_never_dropped():
    plan = plan_packing([10], row_length=4)
    assert plan.num_rows == 3
    assert plan.positions.tolist() == [[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 0, 0]]
    assert plan.source_token.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, -1, -1]]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="document 1 is empty"):
        plan_packing([3, 0], row_length=4)
    with pytest.raises(ValueError, match="row_length must be >= 1"):
        plan_packing([3], row_length=0)
    with pytest.raises(ValueError, match="no documents"):
        plan_packing([], row_length=4)
    with pytest.raises(ValueError, match="plan covers 3 tokens, got 2 values"):
        plan_packing([3], row_length=4).gather(torch.arange(2), pad_value=0)
