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


def test_annealed_shifted_mdlm_training_on_flex_matches_sdpa():
    """Attention annealing (mdlm.attention_annealing_steps) trains through compiled flex: the
    loss and gradients of two annealed steps equal SDPA's."""
    from xdllm.nn.factory import denoiser_transformer
    from xdllm_models.mdlm.collator import MDLMCollator
    from xdllm_models.mdlm.loss import MDLMLoss

    tokenizer = builtin_tokenizer()
    generator = torch.Generator().manual_seed(5)
    for step in (1, 3):
        examples = [dict(prompt_ids=torch.randint(4, tokenizer.vocab_size, (3,), generator=generator).tolist(),
                         target_ids=torch.randint(4, tokenizer.vocab_size, (9,), generator=generator).tolist(),
                         sample_index=index, step=step) for index in range(8)]
        batch = MDLMCollator(tokenizer, attention_annealing_steps=4)(examples)
        assert float(batch["attention_visible"]) == step / 4
        batch = {key: value.cuda() for key, value in batch.items()}
        results = {}
        for backend in ("flex", "sdpa"):
            torch.manual_seed(0)
            model = denoiser_transformer(vocab_size=tokenizer.vocab_size, d_model=64, n_layers=2, n_heads=2,
                                         max_positions=64, attn_backend=backend, shift_outputs=True).cuda()
            loss = MDLMLoss()(model, batch)["loss"]
            loss.backward()
            results[backend] = (loss.detach(), {name: p.grad for name, p in model.named_parameters()})
        torch.testing.assert_close(results["flex"][0], results["sdpa"][0], atol=1e-4, rtol=1e-4)
        for name, grad in results["sdpa"][1].items():
            torch.testing.assert_close(results["flex"][1][name], grad, atol=1e-3, rtol=1e-3, msg=name)
