"""BD3-LM training under FlexAttention on CUDA: the [x_t | x_0] loss and gradients match SDPA."""

import pytest
import torch
from bd3lm_helpers import examples

from xdllm.nn.factory import rotary_transformer
from xdllm_models.bd3lm.collator import BD3LMCollator, PackedBD3LMCollator
from xdllm_models.bd3lm.loss import BD3LMLoss

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PROMPTS = [[4, 5, 6], [7], [8, 9, 10, 11, 12, 13], []]
TARGETS = [[14, 15, 16, 17, 18], [6, 7, 8], [9], [10, 11, 12, 13, 14, 15, 16, 17, 18]]


def _loss_and_gradients(backend: str, tokenizer, batch):
    torch.manual_seed(0)
    model = rotary_transformer(vocab_size=tokenizer.vocab_size, d_model=64, n_layers=2, n_heads=2,
                               max_positions=128, attn_backend=backend).cuda()
    loss = BD3LMLoss(4)(model, batch)["loss"]
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_flex_gives_the_loss_and_gradients_of_sdpa(tokenizer, packed):
    collator = (PackedBD3LMCollator(tokenizer, 4, row_length=32, seed=1) if packed
                else BD3LMCollator(tokenizer, 4, seed=1))
    batch = {key: value.cuda() for key, value in collator(examples(PROMPTS, TARGETS)).items()}
    flex_loss, flex_grads = _loss_and_gradients("flex", tokenizer, batch)
    sdpa_loss, sdpa_grads = _loss_and_gradients("sdpa", tokenizer, batch)
    torch.testing.assert_close(flex_loss, sdpa_loss, atol=1e-4, rtol=1e-4)
    for name, grad in sdpa_grads.items():
        torch.testing.assert_close(flex_grads[name], grad, atol=1e-3, rtol=1e-3, msg=name)
