"""Vocab-sharded DTensor logits (Shard(-1)) give the same losses and gradients as plain ones.

Runs on a single-process gloo group (world size 1), which exercises the DTensor gather path
without spawning ranks.
"""

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from xdllm.losses import (
    BlockDiffusionCrossEntropyLoss,
    DFlashDecayLoss,
    HybridDiffusionLLMLoss,
    MDLMCrossEntropyLoss,
    encoder_ar_loss,
)

if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with the gloo backend is not available in this build",
                allow_module_level=True)

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Shard  # noqa: E402

B, L, V = 2, 6, 9


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    store = tmp_path_factory.mktemp("gloo") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def shard_vocab(mesh, tensor, dim=-1):
    """A DTensor view of ``tensor`` sharded along ``dim``, differentiable back to ``tensor``."""
    return DTensor.from_local(tensor, mesh, [Shard(dim % tensor.dim())], run_check=False)


def batch(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, L, V, generator=g).to(torch.bfloat16).requires_grad_(True)
    targets = torch.randint(0, V, (B, L), generator=g)
    noise_mask = torch.rand(B, L, generator=g) < 0.6
    p_mask = torch.full((B, L), 0.4)
    loss_mask = torch.ones(B, L)
    return logits, (targets, noise_mask, p_mask, loss_mask)


def loss_and_grad(fn, *leaves):
    loss = fn()
    grads = torch.autograd.grad(loss, leaves)
    return loss.detach(), grads


@pytest.mark.parametrize("loss_cls", [MDLMCrossEntropyLoss, BlockDiffusionCrossEntropyLoss])
def test_diffusion_losses_accept_vocab_sharded_logits(mesh, loss_cls):
    logits, rest = batch(0)
    loss = loss_cls()
    plain, plain_grad = loss_and_grad(lambda: loss(logits, *rest).total_loss, logits)
    sharded, sharded_grad = loss_and_grad(
        lambda: loss(shard_vocab(mesh, logits), *rest).total_loss, logits)
    assert not isinstance(sharded, DTensor) and sharded.dtype == torch.float32
    assert sharded.item() == plain.item()
    torch.testing.assert_close(sharded_grad, plain_grad, rtol=0, atol=0)


@pytest.mark.parametrize("legacy", [False, True])
def test_hybrid_accepts_vocab_sharded_logits(mesh, legacy):
    logits, rest = batch(1)
    causal = torch.randn(B, L, V, generator=torch.Generator().manual_seed(10))
    causal.requires_grad_(True)
    loss = HybridDiffusionLLMLoss(alpha=0.5)
    loss_mask_ar = torch.ones(B, L)

    def run(diffusion, causal_branch):
        if legacy:
            return loss(torch.cat([diffusion, causal_branch.to(diffusion.dtype)], 1), *rest,
                        loss_mask_ar=loss_mask_ar).total_loss
        return loss(diffusion, *rest, loss_mask_ar=loss_mask_ar,
                    causal_logits=causal_branch).total_loss

    plain, plain_grads = loss_and_grad(lambda: run(logits, causal), logits, causal)
    if legacy:
        def sharded_run():
            stacked = torch.cat([logits, causal.to(logits.dtype)], 1)
            return loss(shard_vocab(mesh, stacked), *rest, loss_mask_ar=loss_mask_ar).total_loss
    else:
        def sharded_run():
            return run(shard_vocab(mesh, logits), shard_vocab(mesh, causal))
    sharded, sharded_grads = loss_and_grad(sharded_run, logits, causal)
    assert sharded.item() == plain.item()
    for got, want in zip(sharded_grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_encoder_ar_loss_accepts_vocab_sharded_logits(mesh):
    logits, (targets, *_) = batch(2)
    plain, plain_grad = loss_and_grad(lambda: encoder_ar_loss(logits, targets), logits)
    sharded, sharded_grad = loss_and_grad(
        lambda: encoder_ar_loss(shard_vocab(mesh, logits), targets), logits)
    assert sharded.item() == plain.item()
    torch.testing.assert_close(sharded_grad, plain_grad, rtol=0, atol=0)


def test_dflash_accepts_vocab_sharded_logits_and_lm_head(mesh):
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(B, L, 4, generator=g, requires_grad=True)
    weight = torch.randn(V, 4, generator=g, requires_grad=True)
    targets = torch.randint(0, V, (B, L), generator=g)
    block_mask = torch.ones(B, L)
    loss = DFlashDecayLoss(chunk_size=5)

    plain = loss(F.linear(hidden, weight), targets, block_mask, block_size=4)
    plain_grads = torch.autograd.grad(plain.total_loss, (hidden, weight))
    sharded = loss(shard_vocab(mesh, F.linear(hidden, weight)), targets, block_mask, block_size=4)
    sharded_grads = torch.autograd.grad(sharded.total_loss, (hidden, weight))
    assert sharded.total_loss.item() == plain.total_loss.item()
    assert torch.equal(sharded.draft_correct_per_pos, plain.draft_correct_per_pos)
    for got, want in zip(sharded_grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=0, atol=0)

    fused = loss.forward_fused(hidden, shard_vocab(mesh, weight, dim=0), targets, block_mask,
                               block_size=4)
    fused_grads = torch.autograd.grad(fused.total_loss, (hidden, weight))
    assert fused.total_loss.item() == pytest.approx(plain.total_loss.item(), abs=1e-5)
    for got, want in zip(fused_grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
