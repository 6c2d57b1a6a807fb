"""Noise schedules: endpoints, monotonicity, construction by name."""

import math

import pytest
import torch

from xdllm.diffusion.schedules import CosineSchedule, LinearSchedule, LogLinearSchedule, make_noise_schedule


@pytest.mark.parametrize("schedule, at_half", [
    (LinearSchedule(), 0.5), (CosineSchedule(), math.sin(math.pi / 4)),
    (LogLinearSchedule(eps=0.1), 0.45)])
def test_mask_prob_values_and_monotonicity(schedule, at_half):
    t = torch.linspace(0, 1, 101, dtype=torch.float64)
    m = schedule.mask_prob(t)
    assert m[0] == 0 and (m.diff() > 0).all()
    assert math.isclose(schedule.mask_prob(torch.tensor(0.5, dtype=torch.float64)).item(),
                        at_half, rel_tol=1e-12)


def test_endpoints_and_names():
    one = torch.tensor(1.0)
    assert LinearSchedule().mask_prob(one) == 1 and CosineSchedule().mask_prob(one) == 1
    assert math.isclose(LogLinearSchedule(eps=1e-3).mask_prob(one).item(), 0.999, rel_tol=1e-6)
    assert isinstance(make_noise_schedule("log-linear"), LogLinearSchedule)
    cosine = CosineSchedule()
    assert make_noise_schedule(cosine) is cosine
    with pytest.raises(ValueError, match="unknown noise schedule"):
        make_noise_schedule("quadratic")
    with pytest.raises(TypeError):
        LinearSchedule().mask_prob(torch.tensor([1]))
