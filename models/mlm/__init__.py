"""MLM: the masked language model family.

Roles, each in its own module: ``model`` (RotaryTransformerMLMModel), ``loss`` (MLMLoss),
``collator`` (DefaultMLMCollator and the seq2seq train / prediction collators),
``packed_collator`` (PackedMLMCollator), ``types`` (MLMBatch, ...), ``predictor``
(MLMPredictor), ``history`` (HistoryTopKPlugin); Hydra configs in ``configs/``.
"""

from pathlib import Path

from xdllm.model_family import ModelFamily

FAMILY = ModelFamily(
    name="mlm",
    description="Masked language model: rotary transformer, absorbing [MASK] corruption, "
                "confidence-ordered iterative unmasking",
    config_dir=Path(__file__).parent / "configs",
)
