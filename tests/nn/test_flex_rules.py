"""Compiled FlexAttention (CPU inference) and SDPA give the same logits under the causal and the
block-diffusion rules, on packed rows with padding. Each rule compiles once (~25 s on CPU)."""

import pytest
import torch
from packed_rows import random_packed_rows

from xdllm.nn import RotaryTransformer, RotaryTransformerConfig, default_positions
from xdllm.nn.masks import AnnealedCausalMask, BlockDiffusionMask, CausalMask

VOCAB = 37
# Block diffusion: [x_t | x_0] halves of 16, the same total length. A multiple of 16: on CPU, torch
# 2.13's compiled flex gave wrong rows for lengths of 8 modulo 16 (8, 24, 40, 56 measured).
BATCH, LENGTH = 2, 32


def make_model(backend: str) -> RotaryTransformer:
    torch.manual_seed(0)
    config = RotaryTransformerConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, max_positions=64,
                                     attn_backend=backend)
    return RotaryTransformer(config).eval()


def model_inputs(rule) -> dict:
    """Packed, padded rows; under block diffusion a clean half of length N and its noisy copy,
    the two halves sharing segment ids, padding and positions."""
    half = LENGTH // 2 if isinstance(rule, BlockDiffusionMask) else LENGTH
    segments, real = random_packed_rows(BATCH, half, seed=11)
    positions = default_positions(half, real, segments, torch.device("cpu"))
    ids = torch.randint(0, VOCAB, (BATCH, half), generator=torch.Generator().manual_seed(12))
    if isinstance(rule, BlockDiffusionMask):
        noisy = torch.where(torch.rand(ids.shape) < 0.5, 0, ids)
        ids, segments, real, positions = (torch.cat([noisy, ids], 1), segments.repeat(1, 2), real.repeat(1, 2),
                                          positions.repeat(1, 2))
    return dict(input_ids=ids, attention_mask=real, segment_ids=segments, positions=positions)


@pytest.mark.parametrize("rule", [CausalMask(), BlockDiffusionMask(4)], ids=repr)
def test_compiled_flex_and_sdpa_agree_under_the_rule(rule):
    inputs = model_inputs(rule)
    with torch.no_grad():
        flex = make_model("flex")(**inputs, mask_rule=rule)
        sdpa = make_model("sdpa")(**inputs, mask_rule=rule)
    torch.testing.assert_close(flex, sdpa, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_compiled_flex_reads_the_annealed_rules_tensor_fields_as_sdpa_does():
    """The annealed rule's share and salt are 0-d tensors captured by the mask_mod; two shares
    through one compiled flex give SDPA's logits for each."""
    inputs = model_inputs(CausalMask())
    flex_model, sdpa_model = make_model("flex"), make_model("sdpa")
    for visible in (0.3, 0.8):
        rule = AnnealedCausalMask(torch.tensor(visible), torch.tensor(5))
        with torch.no_grad():
            torch.testing.assert_close(flex_model(**inputs, mask_rule=rule), sdpa_model(**inputs, mask_rule=rule),
                                       atol=1e-5, rtol=0)


def test_annealed_shares_and_salts_reuse_one_flex_compilation(flex_compile_counter):
    """Each training step anneals with a new share and salt; as 0-d tensors they are inputs of
    the compiled attention, not constants it is specialised on."""
    inputs = model_inputs(CausalMask())
    model = make_model("flex")
    with torch.no_grad():
        for step in range(4):
            model(**inputs, mask_rule=AnnealedCausalMask(torch.tensor(step / 4), torch.tensor(step)))
    assert flex_compile_counter.frame_count == 1
