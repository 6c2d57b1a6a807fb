import pytest
import torch

from xdllm.nn.attention import (
    PAD_DOCUMENT_ID,
    attend,
    build_attention_mask,
    check_backend_can_run,
    document_ids_for,
    resolve_attention_backend,
)
from xdllm.nn.masks import CausalMask, DocumentMask
from xdllm.nn.transformer import default_positions


def test_auto_picks_flex_on_cuda_and_sdpa_elsewhere():
    assert resolve_attention_backend("auto", torch.device("cuda")) == "flex"
    assert resolve_attention_backend("auto", torch.device("cpu")) == "sdpa"
    assert resolve_attention_backend("flex", torch.device("cpu")) == "flex"
    # ValueError at runtime; beartype's TypeCheckError (a TypeError) first when checking types.
    with pytest.raises((ValueError, TypeError), match="xformers"):
        resolve_attention_backend("xformers", torch.device("cpu"))


def test_flex_off_cuda_is_refused_while_grad_is_enabled_only():
    with pytest.raises(RuntimeError, match="no backward pass off CUDA"):
        check_backend_can_run("flex", torch.device("cpu"))
    with torch.no_grad():
        check_backend_can_run("flex", torch.device("cpu"))
    check_backend_can_run("sdpa", torch.device("cpu"))


def test_document_ids_combine_segments_and_padding():
    mask = torch.tensor([[False, True, True, True]])
    segments = torch.tensor([[7, 0, 0, 1]])
    assert document_ids_for(None, None) is None
    assert document_ids_for(mask, None).tolist() == [[PAD_DOCUMENT_ID, 0, 0, 0]]
    assert document_ids_for(None, segments).tolist() == [[7, 0, 0, 1]]
    assert document_ids_for(mask, segments).tolist() == [[PAD_DOCUMENT_ID, 0, 0, 1]]


def test_dense_mask_is_same_document_and_never_empties_a_row():
    ids = torch.tensor([[0, 0, 1, -1]])
    positions = torch.tensor([[0, 1, 0, 0]])
    mask = build_attention_mask("sdpa", DocumentMask(), ids, positions)
    expected = torch.tensor([[1, 1, 0, 0],
                             [1, 1, 0, 0],
                             [0, 0, 1, 0],
                             [0, 0, 0, 1]], dtype=torch.bool)
    assert mask.shape == (1, 1, 4, 4)
    assert torch.equal(mask[0, 0], expected)


def test_one_document_needs_no_mask_unless_the_rule_restricts_it():
    positions = torch.arange(3)[None]
    assert build_attention_mask("sdpa", DocumentMask(), None, positions) is None
    causal = build_attention_mask("sdpa", CausalMask(), None, positions)
    assert torch.equal(causal[0, 0], torch.ones(3, 3, dtype=torch.bool).tril())


def test_sdpa_attend_with_mask_equals_per_document_attention():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    ids = torch.tensor([[0, 0, 0, 1, 1]])
    positions = torch.tensor([[0, 1, 2, 0, 1]])
    out = attend(q, k, v, "sdpa", build_attention_mask("sdpa", DocumentMask(), ids, positions))
    first = attend(q[:, :, :3], k[:, :, :3], v[:, :, :3], "sdpa", None)
    second = attend(q[:, :, 3:], k[:, :, 3:], v[:, :, 3:], "sdpa", None)
    torch.testing.assert_close(out, torch.cat([first, second], dim=2))


def test_attend_rejects_mismatched_mask_kind():
    q = torch.randn(1, 1, 2, 4)
    with pytest.raises(TypeError, match="needs a BlockMask"):
        attend(q, q, q, "flex", torch.ones(1, 1, 2, 2, dtype=torch.bool))


def test_default_positions_count_real_tokens_per_segment():
    assert default_positions(4, None, None, torch.device("cpu")).tolist() == [[0, 1, 2, 3]]
    left_padded = torch.tensor([[False, False, True, True], [True, True, True, False]])
    assert default_positions(4, left_padded, None, torch.device("cpu")).tolist() == [
        [0, 0, 0, 1], [0, 1, 2, 2]]
    segments = torch.tensor([[0, 0, 0, 1, 1, 2, -1, -1]])
    assert default_positions(8, None, segments, torch.device("cpu")).tolist() == [
        [0, 1, 2, 0, 1, 0, 0, 1]]
    mask = torch.tensor([[False, True, True, True, True]])
    segments = torch.tensor([[-1, 0, 0, 1, 1]])
    assert default_positions(5, mask, segments, torch.device("cpu")).tolist() == [[0, 0, 1, 0, 1]]
