"""A model exposing ``final_hidden`` and ``lm_head_weight`` is read through them by every loss,
predictor and evaluator: training refuses one whose ``forward`` gives other logits, before the
run writes anything (a change made to ``forward`` alone would be ignored)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.errors import XdllmError
from xdllm.family_fork import fork_family
from xdllm.run.preflight import check_forward_matches_projection
from xdllm_models.mlm.model import RotaryTransformerMLMModel


class ScaledLogits(RotaryTransformerMLMModel):
    def forward(self, x_t, **inputs):
        return super().forward(x_t, **inputs) / 2


class ShortLogits(RotaryTransformerMLMModel):
    def forward(self, x_t, **inputs):
        return super().forward(x_t, **inputs)[:, :-1]


class NoProjection(torch.nn.Module):
    def forward(self, x_t):
        return torch.zeros(*x_t.shape, 5)


IDS = torch.randint(0, 12, (2, 8), generator=torch.Generator().manual_seed(0))


def small(kind: type) -> torch.nn.Module:
    torch.manual_seed(0)
    return kind(vocab_size=12, d_model=32, n_layers=1, n_heads=2).eval()


def test_a_model_whose_forward_is_its_projection_passes():
    with torch.no_grad():
        check_forward_matches_projection(small(RotaryTransformerMLMModel), IDS)
        check_forward_matches_projection(NoProjection(), IDS)  # read through forward: nothing to compare


@pytest.mark.parametrize(("kind", "said"), [
    (ScaledLogits, r"\(they differ by up to \d"),
    (ShortLogits, r"\(forward returns \(2, 7, 12\), the projection \(2, 8, 12\)\)"),
])
def test_a_forward_that_gives_other_logits_is_refused(kind: type, said: str):
    with torch.no_grad(), pytest.raises(XdllmError, match=said) as refused:
        check_forward_matches_projection(small(kind), IDS)
    assert str(refused.value).startswith(f"{kind.__name__}.forward does not give the logits of {kind.__name__}"
                                         f".final_hidden projected by {kind.__name__}.lm_head_weight")
    assert "Make the change in final_hidden or lm_head_weight" in str(refused.value)


def test_training_a_copied_family_whose_forward_was_changed_alone_is_refused_before_the_run_is_made(tmp_path: Path,
                                                                                                     capsys):
    name = f"nf_scaled_{uuid.uuid4().hex[:8]}"
    fork = fork_family("mlm", name, tmp_path / "families")
    model = fork.package_dir / "model.py"
    changed = model.read_text().replace("segment_ids=segment_ids, block_mask=block_mask, mask_rule=mask_rule)",
                                        "segment_ids=segment_ids, block_mask=block_mask, mask_rule=mask_rule) / 2", 1)
    assert changed != model.read_text()
    model.write_text(changed)
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, f"model={name}", f"model_search_path=[{tmp_path / 'families'}]",
                 "trainer.max_steps=2", f"run_dir={run_dir}"]) == 2
    assert "RotaryTransformerMLMModel.forward does not give the logits of" in capsys.readouterr().err
    assert not run_dir.exists()
