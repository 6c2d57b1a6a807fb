import math

import pytest
import torch

from xdllm.nn.rotary import RotaryEmbedding, apply_rotary


def rotate(x, positions, max_positions=64):
    rotary = RotaryEmbedding(x.shape[-1], max_positions)
    cos, sin = rotary(positions)
    return apply_rotary(x, cos, sin)


def test_two_dim_rotation_matches_hand_computed_angle():
    # head_dim 2: one frequency (1.0), so position p rotates (1, 0) to (cos p, sin p).
    x = torch.tensor([1.0, 0.0]).expand(1, 1, 3, 2)
    out = rotate(x, torch.tensor([[0, 1, 5]]))
    expected = torch.tensor([[math.cos(p), math.sin(p)] for p in (0, 1, 5)])
    torch.testing.assert_close(out[0, 0], expected)


def test_position_zero_is_identity_and_norm_is_preserved():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 8)
    zero = rotate(x, torch.zeros(2, 5, dtype=torch.long))
    torch.testing.assert_close(zero, x)
    moved = rotate(x, torch.randint(0, 64, (2, 5)))
    torch.testing.assert_close(moved.norm(dim=-1), x.norm(dim=-1))


def test_query_key_score_depends_only_on_relative_position():
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(m, n):
        rq = rotate(q, torch.tensor([[m]]))
        rk = rotate(k, torch.tensor([[n]]))
        return (rq * rk).sum()

    torch.testing.assert_close(score(3, 1), score(12, 10))
    assert not torch.allclose(score(3, 1), score(3, 2))


def test_odd_head_dim_and_bad_max_positions_are_rejected():
    with pytest.raises(ValueError, match="head_dim must be even"):
        RotaryEmbedding(7, 16)
    with pytest.raises(ValueError, match="max_positions"):
        RotaryEmbedding(8, 0)


def test_rotation_is_bit_for_bit_the_pairwise_formula_on_a_strided_view():
    """Each half rotated apart, ``(a cos - b sin, b cos + a sin)``: the formula checkpoints were
    trained with. The faster form must give the same bits (on the non-contiguous query/key views
    attention passes), so earlier runs resume and generate exactly as they did."""
    torch.manual_seed(0)
    heads = torch.randn(3, 7, 3, 4, 16)  # [batch, seq_len, q/k/v, heads, head_dim], as attention's projection
    query = heads.permute(2, 0, 3, 1, 4)[0]
    angles = torch.rand(3, 7, 8) * 100
    cos, sin = angles.cos(), angles.sin()
    first, second = query.chunk(2, dim=-1)
    pairwise = torch.cat((first * cos[:, None] - second * sin[:, None], second * cos[:, None] + first * sin[:, None]),
                         dim=-1)
    assert torch.equal(apply_rotary(query, cos, sin), pairwise)
    assert apply_rotary(query.bfloat16(), cos, sin).dtype == torch.bfloat16
