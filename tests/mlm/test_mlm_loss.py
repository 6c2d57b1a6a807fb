import math

import pytest
import torch

from xdllm_models.mlm.loss import MLMLoss

MASK = 1


class FixedLogits(torch.nn.Module):
    """Returns the given logits whatever the input (plus a parameter so gradients can flow)."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.nn.Parameter(logits)

    def forward(self, x_t, attention_mask=None, positions=None, segment_ids=None):
        return self.logits


def test_loss_is_the_mean_cross_entropy_over_masked_positions_by_hand():
    logits = torch.zeros(1, 3, 6)
    logits[0, 1, 2] = math.log(6.0)  # p(token 2) = 6 / 11 at position 1
    batch = {"input_ids": torch.tensor([[5, MASK, MASK]]), "target_ids": torch.tensor([[5, 2, 3]])}
    out = MLMLoss(MASK)(FixedLogits(logits), batch)
    expected = (-math.log(6 / 11) - math.log(1 / 6)) / 2  # position 0 is not masked
    assert out["loss"].item() == pytest.approx(expected)
    assert out["masked_tokens"].item() == 2


def test_no_masked_position_gives_zero_loss_and_finite_gradients():
    model = FixedLogits(torch.randn(2, 3, 6))
    batch = {"input_ids": torch.full((2, 3), 5), "target_ids": torch.full((2, 3), 2)}
    loss = MLMLoss(MASK)(model, batch)["loss"]
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(model.logits.grad).all()


def test_mismatched_targets_are_a_clear_error():
    batch = {"input_ids": torch.ones(1, 3, dtype=torch.long), "target_ids": torch.ones(1, 2, dtype=torch.long)}
    with pytest.raises(ValueError, match=r"target_ids must have the shape of input_ids \(1, 3\)"):
        MLMLoss(MASK)(FixedLogits(torch.zeros(1, 3, 4)), batch)
