"""Build throwaway model-family packages on disk, for registry and training tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

TOY_MODEL = '''
import torch
from torch import nn


class ToyBagModel(nn.Module):
    """Each position sees its own token embedding plus the mean of the row: tiny and fast."""

    def __init__(self, vocab_size: int, d_model: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(64, d_model)
        self.head = nn.Linear(2 * d_model, vocab_size)

    def forward(self, x_t, attention_mask=None, positions=None, segment_ids=None, block_mask=None):
        if positions is None:
            positions = torch.arange(x_t.shape[1]).expand_as(x_t)
        hidden = self.embed(x_t) + self.position(positions.clamp(max=63))
        if attention_mask is None:
            attention_mask = torch.ones_like(x_t, dtype=torch.bool)
        weights = attention_mask.unsqueeze(-1).float()
        context = (hidden * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True).clamp(min=1)
        return self.head(torch.cat([hidden, context.expand_as(hidden)], dim=-1))
'''

TOY_CONFIG = '''
# @package _global_
model_family: {name}
model:
  _target_: {package}.model.ToyBagModel
  vocab_size: ${{derived.vocab_size}}
collator:
  train:
    _target_: xdllm_models.mlm.collator.MLMSeq2SeqTrainCollator
    seed: ${{seed}}
  val:
    _target_: xdllm_models.mlm.collator.MLMSeq2SeqTrainCollator
    seed: ${{seed}}
  prediction:
    _target_: xdllm_models.mlm.collator.MLMSeq2SeqPredCollator
loss:
  _target_: xdllm_models.mlm.loss.MLMLoss
  mask_token_id: ${{derived.mask_token_id}}
predictor:
  _target_: xdllm_models.mlm.predictor.MLMPredictor
  max_steps: ${{derived.max_new_tokens}}
  max_new_tokens: ${{derived.max_new_tokens}}
  confidence: top_prob
'''


def write_model_package(root: Path, package: str, family_name: str) -> Path:
    """Create ``root/package`` as a model-family package claiming ``family_name``."""
    package_dir = root / package
    (package_dir / "configs" / "model").mkdir(parents=True)
    (package_dir / "__init__.py").write_text(textwrap.dedent(f'''
        from pathlib import Path
        from xdllm.model_family import ModelFamily
        FAMILY = ModelFamily(name="{family_name}", description="throwaway test family",
                             config_dir=Path(__file__).parent / "configs")
    '''))
    (package_dir / "model.py").write_text(TOY_MODEL)
    (package_dir / "configs" / "model" / f"{family_name}.yaml").write_text(
        TOY_CONFIG.format(name=family_name, package=package))
    return root
