"""The hybrid's [x_t | x_0] training under FlexAttention on CUDA: loss and gradients match SDPA
(needs a GPU)."""

import pytest
import torch
from hybrid_helpers import examples

from xdllm.data.tokenizer import builtin_tokenizer
from xdllm_models.hybrid.collator import HybridCollator
from xdllm_models.hybrid.loss import HybridLoss
from xdllm_models.hybrid.model import hybrid_rotary_transformer

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

BLOCK = 4


def _batch():
    tokenizer = builtin_tokenizer()
    generator = torch.Generator().manual_seed(0)
    prompts, targets = [], []
    for _ in range(8):
        ids = torch.randint(4, tokenizer.vocab_size, (int(torch.randint(4, 30, (1,), generator=generator)),),
                            generator=generator).tolist()
        prompts.append(ids[:3])
        targets.append(ids[3:])
    batch = HybridCollator(tokenizer, block_size=BLOCK)(examples(prompts, targets, step=1))
    return tokenizer, {key: value.cuda() for key, value in batch.items()}


def _gradients(backend: str, tokenizer, batch):
    torch.manual_seed(0)
    model = hybrid_rotary_transformer(vocab_size=tokenizer.vocab_size, d_model=64, n_layers=2, n_heads=2,
                                      max_positions=128, attn_backend=backend).cuda()
    loss = HybridLoss(block_size=BLOCK)(model, batch)["loss"]
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


def test_flex_trains_the_hybrid_on_cuda_and_matches_sdpa_gradients():
    tokenizer, batch = _batch()
    flex_loss, flex_grads = _gradients("flex", tokenizer, batch)
    sdpa_loss, sdpa_grads = _gradients("sdpa", tokenizer, batch)
    torch.testing.assert_close(flex_loss, sdpa_loss, atol=1e-4, rtol=1e-4)
    for name, grad in flex_grads.items():
        torch.testing.assert_close(grad, sdpa_grads[name], atol=1e-3, rtol=1e-3, msg=name)
