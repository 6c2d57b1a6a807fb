"""MDLM, hybrid, block-diffusion and encoder-AR losses against hand-computed references."""

import math

import pytest
import torch
import torch.nn.functional as F

from xdllm.losses import (
    BlockDiffusionCrossEntropyLoss,
    DLLMLossOutput,
    HybridDiffusionLLMLoss,
    MDLMCrossEntropyLoss,
    encoder_ar_loss,
)
from xdllm.losses.token_nll import _compute_per_token_nll

B, L, V = 3, 6, 5


def reference_nll(logits, targets):
    """-log softmax(logits)[target], written out by hand in float64."""
    x = logits.double()
    peak = x.max(dim=-1, keepdim=True).values
    log_normaliser = peak.squeeze(-1) + (x - peak).exp().sum(-1).log()
    picked = x.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return log_normaliser - picked


def make_batch(seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, L, V, generator=g).to(dtype)
    targets = torch.randint(0, V, (B, L), generator=g)
    noise_mask = torch.rand(B, L, generator=g) < 0.5
    p_mask = torch.rand(B, 1, generator=g).expand(B, L).contiguous() * 0.9 + 0.05
    loss_mask = (torch.rand(B, L, generator=g) < 0.8).float()
    return logits, targets, noise_mask, p_mask, loss_mask


def mdlm_reference(logits, targets, noise_mask, p_mask, loss_mask, denominator=None):
    nll = reference_nll(logits, targets)
    selected = noise_mask & (loss_mask != 0)
    numerator = (nll / p_mask.double().clamp_min(1e-8))[selected].sum()
    count = loss_mask.sum().item() if denominator is None else denominator
    return numerator / max(count, 1)


def test_per_token_nll_equals_cross_entropy_and_manual_log_softmax():
    logits, targets, *_ = make_batch()
    nll = _compute_per_token_nll(logits, targets)
    assert nll.shape == (B, L)
    expected = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="none")
    torch.testing.assert_close(nll, expected.view(B, L), rtol=0, atol=0)
    torch.testing.assert_close(nll.double(), reference_nll(logits, targets), rtol=0, atol=1e-6)


def test_mdlm_hand_computed_uniform_logits():
    # Zero logits: every CE is log 3. Selected = noise ∧ supervised = positions 0 and 1,
    # weights 1/0.5 and 1/0.25; N = Σ loss_mask = 3 -> (2 + 4) · log 3 / 3 = 2 log 3.
    logits = torch.zeros(1, 4, 3)
    targets = torch.tensor([[0, 1, 2, 0]])
    noise_mask = torch.tensor([[True, True, False, True]])
    p_mask = torch.tensor([[0.5, 0.25, 0.5, 0.5]])
    loss_mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    out = MDLMCrossEntropyLoss()(logits, targets, noise_mask, p_mask, loss_mask)
    assert isinstance(out, DLLMLossOutput)
    assert out.total_loss.item() == pytest.approx(2 * math.log(3), abs=1e-6)
    assert out.draft_correct_per_pos is None and out.draft_count_per_pos is None


def test_mdlm_matches_reference_with_local_and_global_denominators():
    batch = make_batch(1)
    loss = MDLMCrossEntropyLoss()
    local = loss(*batch).total_loss
    assert local.item() == pytest.approx(mdlm_reference(*batch).item(), abs=1e-6)
    for global_count in (40, torch.tensor(40)):
        out = loss(*batch, num_diffusion_tokens=global_count)
        assert out.total_loss.item() == pytest.approx(
            mdlm_reference(*batch, denominator=40).item(), abs=1e-6)
    assert local.item() != pytest.approx(out.total_loss.item())


def test_mdlm_gradient_matches_reference_gradient():
    logits, *rest = make_batch(2)
    logits.requires_grad_(True)
    MDLMCrossEntropyLoss()(logits, *rest).total_loss.backward()
    reference_logits = logits.detach().double().requires_grad_(True)
    mdlm_reference(reference_logits, *rest).backward()
    torch.testing.assert_close(logits.grad.double(), reference_logits.grad, rtol=0, atol=1e-6)


def test_mdlm_ignores_ar_arguments_and_detaches_dllm_loss():
    logits, targets, noise_mask, p_mask, loss_mask = make_batch(3)
    logits.requires_grad_(True)
    loss = MDLMCrossEntropyLoss()
    plain = loss(logits, targets, noise_mask, p_mask, loss_mask)
    with_ar = loss(logits, targets, noise_mask, p_mask, loss_mask,
                   loss_mask_ar=torch.ones(B, L), num_ar_tokens=1,
                   causal_logits=torch.randn(B, L, V))
    assert with_ar.total_loss.item() == plain.total_loss.item()
    assert plain.dllm_loss.item() == plain.total_loss.item()
    assert not plain.dllm_loss.requires_grad and plain.total_loss.requires_grad


def test_mdlm_clamps_p_mask():
    logits = torch.zeros(1, 2, 3)
    out = MDLMCrossEntropyLoss()(logits, torch.tensor([[0, 1]]), torch.tensor([[True, False]]),
                                 torch.tensor([[0.0, 0.0]]), torch.ones(1, 2))
    assert out.total_loss.item() == pytest.approx(math.log(3) / 1e-8 / 2, rel=1e-6)


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.int64, torch.float32])
def test_loss_mask_dtypes_agree(mask_dtype):
    logits, targets, noise_mask, p_mask, loss_mask = make_batch(4)
    expected = mdlm_reference(logits, targets, noise_mask, p_mask, loss_mask).item()
    out = MDLMCrossEntropyLoss()(logits, targets, noise_mask, p_mask, loss_mask.to(mask_dtype))
    assert out.total_loss.item() == pytest.approx(expected, abs=1e-6)


LOSSES = [MDLMCrossEntropyLoss, HybridDiffusionLLMLoss, BlockDiffusionCrossEntropyLoss]


@pytest.mark.parametrize("loss_cls", LOSSES)
@pytest.mark.parametrize("global_count", [None, 0])
def test_empty_masks_give_zero_and_finite_gradients(loss_cls, global_count):
    logits, targets, noise_mask, p_mask, _ = make_batch(5)
    logits.requires_grad_(True)
    empty = torch.zeros(B, L)
    out = loss_cls()(logits, targets, noise_mask, p_mask, empty, loss_mask_ar=empty,
                     num_diffusion_tokens=global_count, num_ar_tokens=global_count,
                     causal_logits=torch.randn(B, L, V))
    assert out.total_loss.item() == 0.0
    out.total_loss.backward()
    assert torch.isfinite(logits.grad).all() and (logits.grad == 0).all()


@pytest.mark.parametrize("loss_cls", LOSSES)
def test_fp32_upcast_really_computes_in_float32(loss_cls):
    g = torch.Generator().manual_seed(6)
    logits = (torch.randn(2, 8, 1000, generator=g) * 4).to(torch.bfloat16)
    targets = torch.randint(0, 1000, (2, 8), generator=g)
    noise_mask = torch.ones(2, 8, dtype=torch.bool)
    p_mask, loss_mask = torch.ones(2, 8), torch.ones(2, 8)
    args = (targets, noise_mask, p_mask, loss_mask)
    float32_reference = reference_nll(logits.float(), targets).mean().item()
    bf16_nll = F.cross_entropy(logits.reshape(-1, 1000), targets.reshape(-1), reduction="none")
    bf16_reference = bf16_nll.sum() / bf16_nll.numel()

    upcast = loss_cls(fp32_upcast=True)(logits, *args).total_loss
    assert upcast.dtype == torch.float32
    assert upcast.item() == pytest.approx(float32_reference, abs=1e-5, rel=1e-6)
    assert abs(upcast.item() - bf16_reference.item()) > 1e-3

    native = loss_cls(fp32_upcast=False)(logits, *args).total_loss
    assert native.dtype == torch.bfloat16
    assert native.item() == bf16_reference.item()


def hybrid_reference(logits, causal_logits, targets, noise_mask, p_mask, loss_mask, loss_mask_ar,
                     alpha, num_ar=None):
    diffusion = mdlm_reference(logits, targets, noise_mask, p_mask, loss_mask)
    ar_nll = reference_nll(causal_logits[:, :-1], targets[:, 1:])
    ar_mask = loss_mask_ar[:, 1:] != 0
    ar_count = ar_mask.sum().item() if num_ar is None else num_ar
    return alpha * diffusion + ar_nll[ar_mask].sum() / max(ar_count, 1), alpha * diffusion


def test_hybrid_matches_reference_and_separates_dllm_loss():
    logits, targets, noise_mask, p_mask, loss_mask = make_batch(7)
    causal_logits = torch.randn(B, L, V, generator=torch.Generator().manual_seed(70))
    loss_mask_ar = torch.tensor([[1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 1], [1, 0, 1, 0, 1, 0]])
    loss = HybridDiffusionLLMLoss(alpha=0.3)
    out = loss(logits, targets, noise_mask, p_mask, loss_mask, loss_mask_ar=loss_mask_ar,
               causal_logits=causal_logits)
    total, scaled_diffusion = hybrid_reference(logits, causal_logits, targets, noise_mask, p_mask,
                                               loss_mask, loss_mask_ar, alpha=0.3)
    assert out.total_loss.item() == pytest.approx(total.item(), abs=1e-6)
    assert out.dllm_loss.item() == pytest.approx(scaled_diffusion.item(), abs=1e-6)
    assert not out.dllm_loss.requires_grad

    global_out = loss(logits, targets, noise_mask, p_mask, loss_mask, loss_mask_ar=loss_mask_ar,
                      num_ar_tokens=25, causal_logits=causal_logits)
    global_total, _ = hybrid_reference(logits, causal_logits, targets, noise_mask, p_mask,
                                       loss_mask, loss_mask_ar, alpha=0.3, num_ar=25)
    assert global_out.total_loss.item() == pytest.approx(global_total.item(), abs=1e-6)


def test_hybrid_ar_term_hand_computed():
    # Diffusion term empty. Causal logits favour token 1 by ln 2 over two others (V=3):
    # next-token targets [1, 2]; supervised only at target index 1 -> CE = -log(2/4) = ln 2.
    logits = torch.zeros(1, 3, 3)
    causal = torch.zeros(1, 3, 3)
    causal[0, :, 1] = math.log(2.0)
    targets = torch.tensor([[0, 1, 2]])
    zeros = torch.zeros(1, 3)
    out = HybridDiffusionLLMLoss()(logits, targets, zeros.bool(), zeros + 1, zeros,
                                   loss_mask_ar=torch.tensor([[1, 1, 0]]), causal_logits=causal)
    assert out.total_loss.item() == pytest.approx(math.log(2.0), abs=1e-6)
    assert out.dllm_loss.item() == 0.0


def test_hybrid_legacy_layout_equals_separate_causal_logits():
    logits, targets, noise_mask, p_mask, loss_mask = make_batch(8)
    causal_logits = torch.randn(B, L, V, generator=torch.Generator().manual_seed(80))
    loss_mask_ar = torch.ones(B, L)
    stacked = torch.cat([logits, causal_logits], dim=1).requires_grad_(True)
    loss = HybridDiffusionLLMLoss(alpha=2.0)
    legacy = loss(stacked, targets, noise_mask, p_mask, loss_mask, loss_mask_ar=loss_mask_ar)
    separate = loss(logits, targets, noise_mask, p_mask, loss_mask, loss_mask_ar=loss_mask_ar,
                    causal_logits=causal_logits)
    assert legacy.total_loss.item() == separate.total_loss.item()
    assert legacy.dllm_loss.item() == separate.dllm_loss.item()
    legacy.total_loss.backward()
    assert (stacked.grad[:, L:] != 0).any()  # the causal half is trained


def test_hybrid_without_ar_mask_is_scaled_diffusion_only():
    batch = make_batch(9)
    out = HybridDiffusionLLMLoss(alpha=0.5)(*batch, causal_logits=torch.randn(B, L, V))
    assert out.total_loss.item() == pytest.approx(0.5 * mdlm_reference(*batch).item(), abs=1e-6)
    assert out.total_loss.item() == out.dllm_loss.item()


def test_hybrid_ar_mask_without_causal_branch_is_a_clear_error():
    with pytest.raises(ValueError, match="loss_mask_ar was given but there is no causal branch"):
        HybridDiffusionLLMLoss()(*make_batch(10), loss_mask_ar=torch.ones(B, L))


def test_hybrid_rejects_logits_of_the_wrong_length():
    logits, *rest = make_batch(11)
    with pytest.raises(ValueError, match="logits have 12 positions but target_ids has L=6"):
        HybridDiffusionLLMLoss()(torch.cat([logits, logits], 1), *rest,
                                 causal_logits=torch.randn(B, L, V))


def test_block_diffusion_is_flat_mean_over_supervised_positions():
    logits, targets, noise_mask, p_mask, loss_mask = make_batch(12)
    loss = BlockDiffusionCrossEntropyLoss()
    out = loss(logits, targets, noise_mask, p_mask, loss_mask)
    nll = reference_nll(logits, targets)
    expected = nll[loss_mask != 0].sum() / loss_mask.sum()
    assert out.total_loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert out.dllm_loss.item() == out.total_loss.item()
    # Noise mask and p_mask do not gate or weight anything.
    other = loss(logits, targets, ~noise_mask, p_mask * 0.1, loss_mask)
    assert other.total_loss.item() == out.total_loss.item()
    global_out = loss(logits, targets, noise_mask, p_mask, loss_mask, num_diffusion_tokens=50)
    assert global_out.total_loss.item() == pytest.approx(
        (nll[loss_mask != 0].sum() / 50).item(), abs=1e-6)


def test_encoder_ar_loss_counts_pairs_where_both_positions_are_valid():
    g = torch.Generator().manual_seed(13)
    logits = torch.randn(2, 5, V, generator=g).to(torch.bfloat16)
    ids = torch.randint(0, V, (2, 5), generator=g)
    valid = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 0, 1, 1]], dtype=torch.bool)
    pair_nll = [reference_nll(logits[b:b + 1, i:i + 1].float(), ids[b:b + 1, i + 1:i + 2]).item()
                for b in range(2) for i in range(4) if valid[b, i] and valid[b, i + 1]]
    assert len(pair_nll) == 4  # (0,1), (1,2) in row 0; (0,1), (3,4) in row 1
    out = encoder_ar_loss(logits, ids, valid)
    assert out.dtype == torch.float32
    assert out.item() == pytest.approx(sum(pair_nll) / 4, abs=1e-6)
    assert encoder_ar_loss(logits, ids, valid, num_tokens=10).item() == pytest.approx(
        sum(pair_nll) / 10, abs=1e-6)
    all_pairs = reference_nll(logits[:, :-1].float(), ids[:, 1:])
    assert encoder_ar_loss(logits, ids).item() == pytest.approx(all_pairs.mean().item(), abs=1e-6)
    empty = encoder_ar_loss(logits, ids, torch.zeros(2, 5, dtype=torch.bool))
    assert empty.item() == 0.0


def test_hybrid_ar_term_is_upcast_too():
    g = torch.Generator().manual_seed(7)
    causal = (torch.randn(2, 8, 1000, generator=g) * 4).to(torch.bfloat16)
    targets = torch.randint(0, 1000, (2, 8), generator=g)
    ones, nothing = torch.ones(2, 8), torch.zeros(2, 8, dtype=torch.bool)
    loss = HybridDiffusionLLMLoss(fp32_upcast=True)(
        causal, targets, nothing, ones, ones, loss_mask_ar=ones, causal_logits=causal).total_loss
    float32_reference = reference_nll(causal[:, :-1].float(), targets[:, 1:]).mean().item()
    bf16 = F.cross_entropy(causal[:, :-1].reshape(-1, 1000), targets[:, 1:].reshape(-1)).item()
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(float32_reference, abs=1e-5, rel=1e-6)
    assert abs(loss.item() - bf16) > 1e-3


def test_a_python_global_count_and_a_tensor_count_give_the_same_loss():
    g = torch.Generator().manual_seed(8)
    logits, targets = torch.randn(2, 5, 7, generator=g), torch.randint(0, 7, (2, 5), generator=g)
    masks = (torch.ones(2, 5, dtype=torch.bool), torch.ones(2, 5), torch.ones(2, 5))
    as_int = MDLMCrossEntropyLoss()(logits, targets, *masks, num_diffusion_tokens=40).total_loss
    as_tensor = MDLMCrossEntropyLoss()(logits, targets, *masks,
                                       num_diffusion_tokens=torch.tensor(40)).total_loss
    assert as_int.item() == pytest.approx(as_tensor.item())
    assert as_int.item() == pytest.approx(reference_nll(logits, targets).sum().item() / 40)
