"""The chunked cross-entropy on supervised positions equals the plain one (values and gradients)
and never holds more than one ``[chunk, vocab]`` block of float32 logits."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from xdllm.losses import chunked_token_nll, per_token_nll, supervised_token_nll
from xdllm.losses.token_nll import masked_normalised_sum
from xdllm.nn import RotaryTransformer, RotaryTransformerConfig

VOCAB = 211  # a size no other dimension here has, to spot logits


def _leaf(tensor):
    return tensor.clone().requires_grad_(True)


@pytest.mark.parametrize("chunk_size", [1, 7, 40, 1000])
def test_chunked_nll_equals_cross_entropy_of_the_full_logits(chunk_size):
    generator = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(40, 16, generator=generator), torch.randn(VOCAB, 16, generator=generator)
    targets = torch.randint(0, VOCAB, (40,), generator=generator)
    plain_hidden, plain_weight, hidden, weight = _leaf(hidden), _leaf(weight), _leaf(hidden), _leaf(weight)
    plain = F.cross_entropy(plain_hidden @ plain_weight.T, targets, reduction="none")
    chunked = chunked_token_nll(hidden, weight, targets, chunk_size)
    torch.testing.assert_close(chunked, plain)
    scale = torch.linspace(0.5, 1.5, 40)
    (plain * scale).sum().backward()
    (chunked * scale).sum().backward()
    torch.testing.assert_close(hidden.grad, plain_hidden.grad)
    torch.testing.assert_close(weight.grad, plain_weight.grad)


def test_chunked_nll_under_bf16_autocast_projects_in_bf16_and_scores_in_float32():
    generator = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(9, 16, generator=generator), torch.randn(VOCAB, 16, generator=generator)
    targets = torch.randint(0, VOCAB, (9,), generator=generator)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = F.cross_entropy(F.linear(hidden, weight).float(), targets, reduction="none")
        chunked = chunked_token_nll(hidden, weight, targets, chunk_size=4)
    assert chunked.dtype is torch.float32
    torch.testing.assert_close(chunked, plain)


def _model() -> RotaryTransformer:
    torch.manual_seed(0)
    return RotaryTransformer(RotaryTransformerConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4,
                                                     max_positions=64, attn_backend="sdpa"))


def _batch():
    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(0, VOCAB, (3, 24), generator=generator)
    supervised = torch.rand(3, 24, generator=generator) < 0.4
    weights = torch.rand(3, 24, generator=generator) + 0.5  # e.g. MDLM's 1 / t
    return ids, supervised, weights


def _plain_loss(model, ids, supervised, weights):
    nll = per_token_nll(model(ids).float(), ids)
    return masked_normalised_sum(nll * weights, supervised, supervised.sum(), None)


def _chunked_loss(model, ids, supervised, weights, chunk_size=5):
    nll = supervised_token_nll(model.final_hidden(ids), model.lm_head.weight, ids, supervised, chunk_size)
    return (nll * weights[supervised]).sum() / supervised.sum().clamp_min(1)


def test_loss_on_supervised_positions_equals_the_plain_loss_and_its_gradients():
    ids, supervised, weights = _batch()
    plain_model, chunked_model = _model(), _model()
    plain, chunked = _plain_loss(plain_model, ids, supervised, weights), _chunked_loss(chunked_model, ids, supervised,
                                                                                      weights)
    torch.testing.assert_close(chunked, plain)
    plain.backward()
    chunked.backward()
    for (name, parameter), twin in zip(plain_model.named_parameters(), chunked_model.parameters()):
        torch.testing.assert_close(twin.grad, parameter.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_no_supervised_position_gives_a_zero_loss_that_still_backpropagates():
    ids, _, weights = _batch()
    model = _model()
    loss = _chunked_loss(model, ids, torch.zeros_like(ids, dtype=torch.bool), weights)
    loss.backward()
    assert loss.item() == 0.0 and model.lm_head.weight.grad is not None


class _LargestLogits(TorchDispatchMode):
    """The most rows of any float32 ``[rows, VOCAB]`` (or ``[..., rows, VOCAB]``) tensor an op
    produced, forward and backward; the LM head's weight and gradient transposed (``[d_model,
    VOCAB]``, d_model 32) are not logits."""

    def __init__(self):
        super().__init__()
        self.rows = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if (isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float32
                    and tensor.shape[-1:] == (VOCAB,) and tensor.shape != (32, VOCAB)):
                self.rows = max(self.rows, tensor.numel() // VOCAB)
        return out


@pytest.mark.parametrize("path, largest", [("plain", 3 * 24), ("chunked", 5)])
def test_only_the_plain_path_materialises_float32_logits_of_every_token(path, largest):
    ids, supervised, weights = _batch()
    model = _model()
    with _LargestLogits() as spy:
        loss = (_plain_loss if path == "plain" else _chunked_loss)(model, ids, supervised, weights)
        loss.backward()
    assert spy.rows == largest


def test_chunk_size_must_be_positive():
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        chunked_token_nll(torch.zeros(2, 4), torch.zeros(VOCAB, 4), torch.zeros(2, dtype=torch.long), chunk_size=0)


def test_the_mlm_loss_takes_the_chunked_path_with_the_plain_value_and_gradients():
    from xdllm_models.mlm.loss import MLMLoss
    from xdllm_models.mlm.model import RotaryTransformerMLMModel

    def model():
        torch.manual_seed(0)
        return RotaryTransformerMLMModel(VOCAB, d_model=32, n_layers=1, n_heads=4, max_positions=64)

    ids, supervised, _ = _batch()
    batch = {"input_ids": torch.where(supervised, 1, ids), "target_ids": ids,
             "segment_ids": torch.arange(24).div(7, rounding_mode="floor").expand(3, 24)}
    plain_model, chunked_model = model(), model()
    plain = MLMLoss(1, chunk_size=None)(plain_model, batch)
    with _LargestLogits() as spy:
        chunked = MLMLoss(1, chunk_size=8)(chunked_model, batch)
    assert spy.rows == 8 and chunked["masked_tokens"] == plain["masked_tokens"] == supervised.sum()
    torch.testing.assert_close(chunked["loss"], plain["loss"])
    plain["loss"].backward()
    chunked["loss"].backward()
    for (name, parameter), twin in zip(plain_model.named_parameters(), chunked_model.parameters()):
        torch.testing.assert_close(twin.grad, parameter.grad, atol=1e-6, rtol=1e-5, msg=name)


def _diffusion_batch():
    """A batch for the MDLM and ARLM losses: a padded row, supervised and corrupted positions
    that differ, and per-position levels."""
    ids, supervised, weights = _batch()
    generator = torch.Generator().manual_seed(3)
    attention_mask = torch.ones(3, 24, dtype=torch.bool)
    attention_mask[2, 18:] = False
    supervised &= attention_mask
    noise = supervised & (torch.rand(3, 24, generator=generator) < 0.6)
    return {"input_ids": torch.where(noise, 1, ids), "target_ids": ids, "attention_mask": attention_mask,
            "positions": torch.arange(24).expand(3, 24), "noise_mask": noise, "p_mask": 1 / weights,
            "loss_mask": supervised}


def _family_losses(family, chunk_size):
    from xdllm_models.arlm.loss import ARLMLoss
    from xdllm_models.bd3lm.loss import BD3LMLoss
    from xdllm_models.mdlm.loss import MDLMLoss

    if family.startswith("bd3lm"):
        return BD3LMLoss(4, objective=family.removeprefix("bd3lm-"), chunk_size=chunk_size)
    return (MDLMLoss if family == "mdlm" else ARLMLoss)(chunk_size=chunk_size)


COUNT_KEYS = {"mdlm": "num_diffusion_tokens", "arlm": "num_ar_tokens", "bd3lm-nelbo": "num_diffusion_tokens",
              "bd3lm-flat": "num_masked_tokens"}


@pytest.mark.parametrize("family, largest", [("mdlm", 4), ("arlm", 4), ("bd3lm-nelbo", 4), ("bd3lm-flat", 4)])
@pytest.mark.parametrize("global_count", [None, 50.0])
def test_the_family_losses_take_the_chunked_path_with_the_plain_value_and_gradients(family, largest, global_count):
    from xdllm.interfaces import LossContext

    batch = _diffusion_batch()
    context = None if global_count is None else LossContext(counts={COUNT_KEYS[family]: torch.tensor(global_count)})
    plain_model, chunked_model = _model(), _model()
    plain = _family_losses(family, None)(plain_model, batch, context)
    with _LargestLogits() as spy:
        chunked = _family_losses(family, 4)(chunked_model, batch, context)
        chunked["loss"].backward()
    assert spy.rows == largest
    assert chunked.keys() == plain.keys()
    for key in chunked:
        torch.testing.assert_close(chunked[key], plain[key], msg=key)
    plain["loss"].backward()
    for (name, parameter), twin in zip(plain_model.named_parameters(), chunked_model.parameters()):
        torch.testing.assert_close(twin.grad, parameter.grad, atol=1e-6, rtol=1e-5, msg=name)


def _two_term_case(family):
    """A hybrid or UDLM batch from the family's own collator, its loss class and a fresh network
    (vocabulary ``VOCAB``, d_model 32), with the names of its two global counts."""
    import sys
    from pathlib import Path

    for helpers in ("hybrid", "udlm"):
        sys.path.insert(0, str(Path(__file__).parents[1] / helpers))
    from hybrid_helpers import LetterTokenizer, examples, tiny_hybrid
    from udlm_helpers import tiny_udlm

    from xdllm_models.hybrid.collator import HybridCollator
    from xdllm_models.hybrid.loss import HybridLoss
    from xdllm_models.udlm.collator import UDLMCollator
    from xdllm_models.udlm.loss import UDLMLoss

    prompts, targets = [[4, 5, 6], [], [7, 8, 9, 10, 11]], [[12, 13], [14, 15, 16, 17, 18], [19, 4, 5, 6, 7, 8, 9]]
    rows = examples(prompts, targets, step=5)
    if family == "hybrid":
        batch = HybridCollator(LetterTokenizer(), block_size=4, seed=3)(rows)
        return batch, lambda chunk_size: HybridLoss(4, alpha=0.7, chunk_size=chunk_size), \
            lambda: tiny_hybrid(VOCAB), ("num_diffusion_tokens", "num_ar_tokens")
    batch = UDLMCollator(LetterTokenizer(), block_size=4, seed=3)(rows)
    return batch, lambda chunk_size: UDLMLoss(4, encoder_weight=0.6, chunk_size=chunk_size), \
        lambda: tiny_udlm(VOCAB), ("num_canvas_tokens", "num_encoder_pairs")


@pytest.mark.parametrize("family", ["hybrid", "udlm"])
@pytest.mark.parametrize("global_counts", [None, (50.0, 70.0)])
def test_the_two_term_losses_take_the_chunked_path_with_the_plain_values_and_gradients(family, global_counts):
    from xdllm.interfaces import LossContext

    batch, loss, model, count_keys = _two_term_case(family)
    context = None if global_counts is None else LossContext(
        counts={key: torch.tensor(count) for key, count in zip(count_keys, global_counts)})
    plain_model, chunked_model = model(), model()
    plain = loss(None)(plain_model, batch, context)
    with _LargestLogits() as spy:
        chunked = loss(4)(chunked_model, batch, context)
        chunked["loss"].backward()
    assert spy.rows == 4
    assert chunked.keys() == plain.keys() and len(plain) == 3
    for key in chunked:
        torch.testing.assert_close(chunked[key], plain[key], msg=key)
    plain["loss"].backward()
    for (name, parameter), twin in zip(plain_model.named_parameters(), chunked_model.parameters()):
        torch.testing.assert_close(twin.grad, parameter.grad, atol=1e-6, rtol=1e-5, msg=name)
