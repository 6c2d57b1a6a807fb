"""Flex forwards are padded to a few fixed shapes: the same logits as unpadded SDPA, and a
bounded number of compilations whatever the batch widths (counted with dynamo's compile
counter backend, which runs the traced graphs eagerly)."""

import pytest
import torch
from packed_rows import random_packed_rows

from xdllm.nn import RotaryTransformer, RotaryTransformerConfig, default_positions
from xdllm.nn.buckets import (
    BUCKET_PAD_DOCUMENT_ID,
    SHAPE_LIMIT,
    allow_shape_buckets,
    bucket,
    bucket_shape,
    pad_tokens,
)
from xdllm.nn.masks import BlockDiffusionMask, BlockDiffusionTokens, CausalMask, DocumentMask

VOCAB = 37


def make_model(backend: str, **overrides) -> RotaryTransformer:
    torch.manual_seed(0)
    options = dict(vocab_size=VOCAB, d_model=32, n_layers=1, n_heads=4, max_positions=128)
    return RotaryTransformer(RotaryTransformerConfig(**options, **overrides, attn_backend=backend)).eval()


def test_buckets_are_powers_of_two_then_multiples_of_a_step_and_widths_multiples_of_16():
    assert [bucket_shape(rows, 1)[0] for rows in (1, 2, 3, 5, 8, 9, 17, 33)] == [1, 2, 4, 8, 8, 16, 24, 40]
    assert ([bucket_shape(3, width)[1] for width in (1, 8, 16, 17, 24, 40, 65, 129, 1000, 2048)]
            == [16, 16, 16, 32, 32, 64, 128, 256, 1024, 2048])
    assert bucket(5, 8, minimum=16) == 16 and bucket(300, 128) == 384


def test_compiling_raises_the_recompile_limit_to_the_buckets_never_lowers_it():
    with torch._dynamo.config.patch(recompile_limit=8):
        allow_shape_buckets()
        assert torch._dynamo.config.recompile_limit == SHAPE_LIMIT == 64
    with torch._dynamo.config.patch(recompile_limit=100):
        allow_shape_buckets()
        assert torch._dynamo.config.recompile_limit == 100


def test_padded_slots_are_a_document_of_their_own():
    tokens = BlockDiffusionTokens(torch.tensor([[0, -1]]), torch.tensor([[3, 0]]), torch.tensor([[False, True]]))
    padded = pad_tokens(tokens, (2, 4))
    assert type(padded) is BlockDiffusionTokens
    assert padded.document.tolist() == [[0, -1, -2, -2], [-2, -2, -2, -2]] and BUCKET_PAD_DOCUMENT_ID == -2
    assert padded.position.tolist() == [[3, 0, 0, 0], [0, 0, 0, 0]]
    assert padded.clean.tolist() == [[False, True, False, False], [False] * 4]


def _inputs(rule, batch: int, length: int, packed: bool) -> dict:
    """Rows of ``length`` tokens: packed documents with padding, or one document per row with
    padding; under block diffusion an ``[x_t | x_0]`` row of twice that length."""
    segments, real = random_packed_rows(batch, length, seed=batch * 100 + length)
    if not packed:
        segments = torch.where(real, 0, segments)
    positions = default_positions(length, real, segments, torch.device("cpu"))
    ids = torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(length))
    inputs = dict(input_ids=ids, attention_mask=real, segment_ids=segments if packed else None, positions=positions)
    if isinstance(rule, BlockDiffusionMask):
        inputs = {key: None if value is None else value.repeat(1, 2) for key, value in inputs.items()}
    return inputs


@pytest.mark.parametrize("rule", [DocumentMask(), CausalMask(), BlockDiffusionMask(3)], ids=repr)
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_bucketed_flex_gives_the_logits_of_unpadded_sdpa(rule, packed, flex_compile_counter):
    flex, sdpa = make_model("flex"), make_model("sdpa")
    with torch.no_grad():
        for batch, length in ((1, 5), (3, 21), (5, 40)):
            inputs = _inputs(rule, batch, length, packed)
            expected = sdpa(**inputs, mask_rule=rule, output_hidden_states=[0])
            got = flex(**inputs, mask_rule=rule, output_hidden_states=[0])
            assert got.logits.shape == expected.logits.shape
            torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=0)
            torch.testing.assert_close(got.hidden_states[0], expected.hidden_states[0], atol=1e-5, rtol=0)


def test_one_document_rows_without_padding_still_see_only_their_row(flex_compile_counter):
    """No attention mask at all: the bucket's added columns must still be masked out."""
    ids = torch.randint(0, VOCAB, (3, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(make_model("flex")(ids), make_model("sdpa")(ids), atol=1e-5, rtol=0)


def test_auto_runs_inference_on_one_document_rows_through_sdpa(monkeypatch):
    """Where auto means flex (CUDA): training and packed rows take flex, inference on rows of
    one document each takes SDPA (nothing to compile per width)."""
    cpu, segments = torch.device("cpu"), torch.zeros(2, 4, dtype=torch.long)
    auto, flex = make_model("auto"), make_model("flex")
    for model in (auto, flex):
        monkeypatch.setattr(model, "attention_backend", lambda device: "flex")
    with torch.no_grad():
        assert auto._forward_backend(cpu, None, None) == "sdpa"
        assert auto._forward_backend(cpu, None, segments) == "flex"
        assert flex._forward_backend(cpu, None, None) == "flex"


@pytest.mark.slow
def test_inductor_compiled_flex_on_a_padded_bucket_matches_sdpa():
    """The real compiled kernel (~20 s to compile on CPU) on rows and a width it pads: 3 x 21
    tokens run as 4 x 32."""
    inputs = _inputs(DocumentMask(), 3, 21, packed=True)
    with torch.no_grad():
        torch.testing.assert_close(make_model("flex")(**inputs), make_model("sdpa")(**inputs), atol=1e-5, rtol=0)
