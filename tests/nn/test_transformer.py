import logging

import pytest
import torch

from xdllm.nn import RotaryTransformer, RotaryTransformerConfig
from xdllm.nn.attention import build_attention_mask, document_ids_for
from xdllm.nn.masks import CausalMask
from xdllm.nn.transformer import TransformerOutput, default_positions

VOCAB = 37


def make_model(**overrides) -> RotaryTransformer:
    torch.manual_seed(0)
    config = RotaryTransformerConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4,
                                     max_positions=64, attn_backend="sdpa", **overrides)
    return RotaryTransformer(config).eval()


def test_logits_shape_dtype_and_default_ff_width():
    model = make_model()
    logits = model(torch.randint(0, VOCAB, (3, 9)))
    assert logits.shape == (3, 9, VOCAB) and logits.dtype == torch.float32
    assert model.blocks[0].mlp.up.out_features == 4 * 32


def test_layernorm_variant_runs_and_differs_from_rmsnorm():
    ids = torch.randint(0, VOCAB, (1, 6))
    with torch.no_grad():
        assert not torch.allclose(make_model(norm="layernorm")(ids), make_model()(ids))


@pytest.mark.parametrize("side", ["left", "right"])
def test_sequence_logits_do_not_change_inside_a_padded_batch(side):
    model = make_model()
    torch.manual_seed(1)
    short, long = torch.randint(0, VOCAB, (5,)), torch.randint(0, VOCAB, (8,))
    pad = torch.full((3,), 0)
    padded_short = torch.cat([pad, short]) if side == "left" else torch.cat([short, pad])
    batch = torch.stack([padded_short, long])
    real = torch.ones(2, 8, dtype=torch.bool)
    real[0, :3] = False if side == "left" else True
    real[0, 5:] = True if side == "left" else False
    with torch.no_grad():
        alone = model(short[None])[0]
        in_batch = model(batch, attention_mask=real)
        long_alone = model(long[None])[0]
    kept = in_batch[0, 3:] if side == "left" else in_batch[0, :5]
    torch.testing.assert_close(kept, alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(in_batch[1], long_alone, atol=1e-5, rtol=0)


def test_explicit_positions_equal_the_default_and_only_relative_positions_matter():
    model = make_model()
    ids = torch.randint(0, VOCAB, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, :2] = False
    positions = (mask.long().cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        default = model(ids, attention_mask=mask)
        explicit = model(ids, attention_mask=mask, positions=positions)
        shifted = model(ids, attention_mask=mask, positions=positions + 3)
        reversed_order = model(ids, attention_mask=mask, positions=positions.flip(-1))
    torch.testing.assert_close(explicit, default)
    # RoPE sees only offsets between tokens: a common shift changes nothing, a reorder does.
    torch.testing.assert_close(shifted, default, atol=1e-5, rtol=0)
    # (small-init attention is nearly uniform, so the effect is small but far above 1e-5)
    assert (reversed_order[0] - default[0]).abs().max() > 1e-4


def test_hidden_states_are_the_residual_stream_after_the_chosen_blocks():
    torch.manual_seed(0)
    config = RotaryTransformerConfig(vocab_size=VOCAB, d_model=32, n_layers=3, n_heads=4, max_positions=64,
                                     attn_backend="sdpa")
    model = RotaryTransformer(config).eval()
    ids = torch.randint(0, VOCAB, (2, 7))
    real = torch.ones(2, 7, dtype=torch.bool)
    real[1, :2] = False
    with torch.no_grad():
        output = model(ids, attention_mask=real, mask_rule=CausalMask(), output_hidden_states=(2, 0))
        logits = model(ids, attention_mask=real, mask_rule=CausalMask())
        positions = default_positions(7, real, None, ids.device)
        mask = build_attention_mask("sdpa", CausalMask(), document_ids_for(real, None), positions)
        cos, sin = model.rotary(positions)
        x, after_block = model.token_embedding(ids), []
        for block in model.blocks:
            x = block(x, cos, sin, "sdpa", mask)
            after_block.append(x)
        manual_logits = model.lm_head(model.final_norm(x))
    assert isinstance(output, TransformerOutput) and len(output.hidden_states) == 2
    assert torch.equal(output.hidden_states[0], after_block[2])
    assert torch.equal(output.hidden_states[1], after_block[0])
    assert torch.equal(output.logits, logits) and torch.equal(output.logits, manual_logits)
    assert model(ids, output_hidden_states=()).hidden_states == ()
    with pytest.raises(ValueError, match="output_hidden_states index 3"):
        model(ids, output_hidden_states=(3,))


def test_gradients_reach_every_parameter_through_a_packed_row():
    model = make_model().train()
    ids = torch.randint(0, VOCAB, (2, 10))
    segments = torch.tensor([[0] * 4 + [1] * 4 + [-1] * 2, [0] * 10])
    model(ids, segment_ids=segments).logsumexp(-1).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_backend_choice_is_logged_once(caplog):
    model = make_model()
    ids = torch.randint(0, VOCAB, (1, 4))
    with caplog.at_level(logging.INFO, logger="xdllm.nn.transformer"):
        model(ids)
        model(ids)
    lines = [r.getMessage() for r in caplog.records if "attention backend" in r.getMessage()]
    assert lines == ["RotaryTransformer attention backend: sdpa (requested 'sdpa', device cpu)"]


def test_bad_inputs_and_configs_fail_with_the_offending_name():
    model = make_model()
    # ValueError at runtime; beartype's TypeCheckError (a TypeError) first when checking types.
    with pytest.raises((ValueError, TypeError), match="segment_ids"):
        model(torch.zeros(1, 4, dtype=torch.long), segment_ids=torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises((ValueError, TypeError), match="block_mask"):
        model(torch.zeros(1, 4, dtype=torch.long), block_mask=object())
    tokens = CausalMask().tokens(torch.zeros(1, 4, dtype=torch.long), torch.arange(4)[None])
    block_mask = CausalMask().block_mask(tokens, tokens)
    with pytest.raises(ValueError, match="block_mask given but the attention backend is 'sdpa'"):
        model(torch.zeros(1, 4, dtype=torch.long), block_mask=block_mask)
    with pytest.raises(ValueError, match="block_mask replaces the mask rule"):
        model(torch.zeros(1, 4, dtype=torch.long), block_mask=block_mask, mask_rule=CausalMask())
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        RotaryTransformerConfig(vocab_size=5, d_model=30, n_heads=4)
    with pytest.raises((ValueError, TypeError), match="eager"):
        RotaryTransformerConfig(vocab_size=5, attn_backend="eager")
    with pytest.raises(ValueError, match="dropout"):
        RotaryTransformerConfig(vocab_size=5, dropout=1.5)
