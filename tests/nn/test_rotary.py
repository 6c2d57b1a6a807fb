import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

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
    positions = torch.randint(0, 64, (3, 7))
    cos, sin = RotaryEmbedding(16, 64)(positions)
    angles = torch.outer(torch.arange(64, dtype=torch.float64),
                         10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16))[positions]
    half_cos, half_sin = angles.cos().float()[:, None], angles.sin().float()[:, None]
    first, second = query.chunk(2, dim=-1)
    pairwise = torch.cat((first * half_cos - second * half_sin, second * half_cos + first * half_sin), dim=-1)
    assert torch.equal(apply_rotary(query, cos, sin), pairwise)
    assert apply_rotary(query.bfloat16(), cos, sin).dtype == torch.bfloat16


def test_the_tables_are_built_once_not_in_every_rotation():
    """A rotation of queries or keys is the float32 copy, one concatenation, two products, a sum and
    the cast back: the tables' concatenations and negation are done once, in the lookup (a layer's
    two rotations used to run six more operations)."""
    class Operations(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.__name__)
            return func(*args, **(kwargs or {}))

    cos, sin = RotaryEmbedding(16, 64)(torch.randint(0, 64, (2, 5)))
    query = torch.randn(2, 5, 3, 4, 16).bfloat16().permute(2, 0, 3, 1, 4)[0]
    with Operations() as seen:
        apply_rotary(query, cos, sin)
    computing = [name for name in seen.names if name.split(".")[0] not in ("split", "unsqueeze", "slice")]
    assert sorted(name.split(".")[0] for name in computing) == ["_to_copy", "_to_copy", "add", "cat", "mul", "mul"]
