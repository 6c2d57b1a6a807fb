"""FlexAttention training on CUDA: gradients match SDPA on packed rows (needs a GPU)."""

import pytest
import torch

from xdllm.data.tokenizer import builtin_tokenizer
from xdllm_models.mlm.loss import MLMLoss
from xdllm_models.mlm.model import RotaryTransformerMLMModel
from xdllm_models.mlm.packed_collator import PackedMLMCollator

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _packed_batch(row_count_hint: int):
    tokenizer = builtin_tokenizer()
    generator = torch.Generator().manual_seed(row_count_hint)
    examples = []
    for index in range(6 * row_count_hint):
        length = int(torch.randint(3, 40, (1,), generator=generator))
        ids = torch.randint(4, tokenizer.vocab_size, (length,), generator=generator).tolist()
        examples.append(dict(prompt_ids=ids[:2], target_ids=ids[2:], sample_index=index, step=0))
    batch = PackedMLMCollator(tokenizer, row_length=128, eps=0.5)(examples)
    return tokenizer, {key: value.cuda() for key, value in batch.items()}


def _gradients(backend: str, tokenizer, batch):
    torch.manual_seed(0)
    model = RotaryTransformerMLMModel(tokenizer.vocab_size, d_model=64, n_layers=2, n_heads=2,
                                      max_positions=256, attn_backend=backend).cuda()
    loss = MLMLoss(tokenizer.mask_token_id)(model, batch)["loss"]
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


def test_flex_trains_on_cuda_and_matches_sdpa_gradients():
    for hint in (1, 2):  # two different row counts: the compiled kernel must handle both
        tokenizer, batch = _packed_batch(hint)
        flex_loss, flex_grads = _gradients("flex", tokenizer, batch)
        sdpa_loss, sdpa_grads = _gradients("sdpa", tokenizer, batch)
        torch.testing.assert_close(flex_loss, sdpa_loss, atol=1e-4, rtol=1e-4)
        for name, grad in sdpa_grads.items():
            torch.testing.assert_close(flex_grads[name], grad, atol=1e-3, rtol=1e-3, msg=name)


def test_auto_backend_chooses_flex_on_cuda():
    model = RotaryTransformerMLMModel(50).cuda()
    assert model.transformer.attention_backend(torch.device("cuda")) == "flex"
