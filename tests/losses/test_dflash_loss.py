"""DFlashDecayLoss: decay weights, normalisation, draft counts, and the fused chunked path."""

import math

import pytest
import torch
import torch.nn.functional as F

from xdllm.losses import DFlashDecayLoss


def reference_nll(logits, targets):
    """-log softmax(logits)[target], written out by hand in float64."""
    x = logits.double()
    peak = x.max(dim=-1, keepdim=True).values
    log_normaliser = peak.squeeze(-1) + (x - peak).exp().sum(-1).log()
    return log_normaliser - x.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def make_batch(batch=2, num_predicted=12, vocab=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, num_predicted, vocab, generator=g)
    targets = torch.randint(0, vocab, (batch, num_predicted), generator=g)
    block_mask = (torch.rand(batch, num_predicted, generator=g) < 0.75).float()
    return logits, targets, block_mask


def test_decay_weights_restart_every_block():
    weights = DFlashDecayLoss(loss_gamma=7.0)._decay_weights(6, 4, "cpu", torch.float32)
    e = math.exp
    expected = [1.0, e(-1 / 7), e(-2 / 7), 1.0, e(-1 / 7), e(-2 / 7)]
    assert weights.tolist() == pytest.approx(expected, abs=1e-7)


def test_decay_weights_single_run_and_uniform():
    single = DFlashDecayLoss(loss_gamma=4.0)._decay_weights(5, None, "cpu", torch.float32)
    assert single.tolist() == pytest.approx([math.exp(-k / 4) for k in range(5)], abs=1e-7)
    uniform = DFlashDecayLoss(loss_gamma=None)._decay_weights(6, 4, "cpu", torch.float32)
    assert uniform.tolist() == [1.0] * 6


def weighted_reference(logits, targets, block_mask, gamma, width):
    offsets = torch.arange(targets.shape[1]) % width if width else torch.arange(targets.shape[1])
    weights = torch.exp(-offsets.double() / gamma)
    return (weights * reference_nll(logits, targets) * block_mask).sum(), weights * block_mask


@pytest.mark.parametrize("block_size", [4, None])
def test_tokens_and_mean_normalisation_match_references(block_size):
    logits, targets, block_mask = make_batch()
    numerator, weighted_mask = weighted_reference(logits, targets, block_mask, 7.0,
                                                  block_size and block_size - 1)
    tokens = DFlashDecayLoss(normalize="tokens")(logits, targets, block_mask,
                                                 block_size=block_size)
    assert tokens.total_loss.item() == pytest.approx((numerator / block_mask.sum()).item(),
                                                     abs=1e-6)
    global_tokens = DFlashDecayLoss()(logits, targets, block_mask, num_tokens=100,
                                      block_size=block_size)
    assert global_tokens.total_loss.item() == pytest.approx((numerator / 100).item(), abs=1e-6)
    mean = DFlashDecayLoss(normalize="mean")(logits, targets, block_mask, block_size=block_size)
    assert mean.total_loss.item() == pytest.approx((numerator / weighted_mask.sum()).item(),
                                                   abs=1e-6)
    assert mean.total_loss.item() != pytest.approx(tokens.total_loss.item())
    assert tokens.dllm_loss.item() == tokens.total_loss.item()
    assert not tokens.dllm_loss.requires_grad


def test_invalid_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="normalize must be"):
        DFlashDecayLoss(normalize="sum")
    with pytest.raises(ValueError, match="loss_gamma must be > 0"):
        DFlashDecayLoss(loss_gamma=0.0)
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        DFlashDecayLoss(chunk_size=0)
    logits, targets, block_mask = make_batch(num_predicted=10)
    loss = DFlashDecayLoss()
    with pytest.raises(ValueError, match=r"T=10 must be a multiple of block_size - 1 = 3"):
        loss(logits, targets, block_mask, block_size=4)
    with pytest.raises(ValueError, match=r"T=10 must be a multiple"):
        loss.forward_fused(torch.randn(2, 10, 3), torch.randn(11, 3), targets, block_mask,
                           block_size=4)


def test_draft_counts_per_offset():
    # bs = 3 -> 2 predicted offsets per block; 2 rows x 2 blocks. Logits put the argmax on token
    # 0, so a position is correct exactly where its target is 0.
    logits = torch.zeros(2, 4, 5)
    logits[..., 0] = 1.0
    targets = torch.tensor([[0, 1, 0, 0], [0, 0, 2, 0]])
    block_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    out = DFlashDecayLoss()(logits, targets, block_mask, block_size=3)
    # offset k=1: positions 0, 2 of each row -> valid 4, correct: (0,0) (0,2) (1,0) = 3
    # offset k=2: positions 1, 3 -> valid 3 ((0,3) is padding), correct: (1,1) (1,3) = 2
    assert out.draft_correct_per_pos.tolist() == [3, 2]
    assert out.draft_count_per_pos.tolist() == [4, 3]
    for no_blocks in (None, 1):
        plain = DFlashDecayLoss()(logits, targets, block_mask, block_size=no_blocks)
        assert plain.draft_correct_per_pos is None and plain.draft_count_per_pos is None


@pytest.mark.parametrize("normalize", ["tokens", "mean"])
def test_empty_block_mask_gives_zero_and_finite_gradients(normalize):
    logits, targets, _ = make_batch()
    logits.requires_grad_(True)
    out = DFlashDecayLoss(normalize=normalize)(logits, targets, torch.zeros(2, 12), block_size=4)
    assert out.total_loss.item() == 0.0
    out.total_loss.backward()
    assert torch.isfinite(logits.grad).all() and (logits.grad == 0).all()
    assert out.draft_count_per_pos.tolist() == [0, 0, 0]


def fused_inputs(bias, seed=1, batch=3, num_predicted=8, dim=6, vocab=40):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, num_predicted, dim, generator=g, requires_grad=True)
    weight = torch.randn(vocab, dim, generator=g, requires_grad=True)
    lm_bias = torch.randn(vocab, generator=g, requires_grad=True) if bias else None
    targets = torch.randint(0, vocab, (batch, num_predicted), generator=g)
    block_mask = (torch.rand(batch, num_predicted, generator=g) < 0.8).float()
    # Make some argmaxes hit so the counts are not trivially zero.
    with torch.no_grad():
        logits = F.linear(hidden, weight, lm_bias)
        targets = torch.where(torch.rand(batch, num_predicted, generator=g) < 0.5,
                              logits.argmax(-1), targets)
    return hidden, weight, lm_bias, targets, block_mask


@pytest.mark.parametrize("chunk_size", [1, 7, 24, 1024])  # B*T = 24; 7 does not divide it
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("normalize,block_size,gamma", [("tokens", 5, 7.0), ("mean", None, 3.0),
                                                        ("tokens", None, None)])
def test_fused_matches_materialised_loss_counts_and_gradients(chunk_size, bias, normalize,
                                                              block_size, gamma):
    hidden, weight, lm_bias, targets, block_mask = fused_inputs(bias)
    params = [t for t in (hidden, weight, lm_bias) if t is not None]
    loss = DFlashDecayLoss(loss_gamma=gamma, use_fused_linear_ce=True, chunk_size=chunk_size,
                           normalize=normalize)

    materialised = loss(F.linear(hidden, weight, lm_bias), targets, block_mask,
                        block_size=block_size)
    expected_grads = torch.autograd.grad(materialised.total_loss, params)
    fused = loss.forward_fused(hidden, weight, targets, block_mask, block_size=block_size,
                               lm_head_bias=lm_bias)
    fused_grads = torch.autograd.grad(fused.total_loss, params)

    assert fused.total_loss.item() == pytest.approx(materialised.total_loss.item(), abs=1e-4)
    if block_size is None:
        assert fused.draft_correct_per_pos is None
    else:
        assert materialised.draft_correct_per_pos.sum() > 0
        assert torch.equal(fused.draft_correct_per_pos, materialised.draft_correct_per_pos)
        assert torch.equal(fused.draft_count_per_pos, materialised.draft_count_per_pos)
    for got, want in zip(fused_grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)


def largest_saved_tensor(fn):
    """Run fn under autograd and return the numel of the largest tensor it saved for backward."""
    sizes = [0]

    def pack(tensor):
        sizes.append(tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return max(sizes)


def test_fused_path_keeps_no_logits_chunk_for_backward():
    batch, num_predicted, dim, vocab, chunk = 2, 16, 4, 500, 8
    hidden, weight, _, targets, block_mask = fused_inputs(False, batch=batch,
                                                          num_predicted=num_predicted, dim=dim,
                                                          vocab=vocab)
    loss = DFlashDecayLoss(chunk_size=chunk)
    materialised = largest_saved_tensor(
        lambda: loss(F.linear(hidden, weight), targets, block_mask, block_size=5))
    fused = largest_saved_tensor(
        lambda: loss.forward_fused(hidden, weight, targets, block_mask, block_size=5))
    assert materialised >= batch * num_predicted * vocab
    assert fused < chunk * vocab


def test_bf16_logits_are_scored_in_float32():
    g = torch.Generator().manual_seed(9)
    logits = (torch.randn(1, 16, 1000, generator=g) * 4).to(torch.bfloat16)
    targets = torch.randint(0, 1000, (1, 16), generator=g)
    loss = DFlashDecayLoss(loss_gamma=None)(logits, targets, torch.ones(1, 16)).total_loss
    bf16 = F.cross_entropy(logits.reshape(-1, 1000), targets.reshape(-1)).item()
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(reference_nll(logits.float(), targets).mean().item(), rel=1e-6)
    assert abs(loss.item() - bf16) > 1e-3
