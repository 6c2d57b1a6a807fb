"""DFlash: a block drafter for speculative decoding of a frozen ``arlm`` target.

The drafter proposes a whole block of tokens in one pass, conditioned on hidden states of the
frozen target; the target verifies the block in one pass and keeps a prefix of it (greedy: the
drafts that match its own choice; sampling: the speculative-sampling rejection rule, so the
output is distributed as the target's own samples), plus its next token. Roles, each in its own
module: ``target`` (reading the target checkpoint, its evenly spread feature layers), ``mask``
(the DFlash attention rule), ``model`` (the drafter network), ``collator`` (ARLM rows plus
sampled anchors), ``loss`` (``DFlashDecayLoss`` on the drafted positions, fused chunked
cross-entropy for large vocabularies), ``metrics`` (per-position draft accuracy, acceptance
length), ``acceptance`` (the verification rules), ``predictor`` (speculative decoding),
``types``. Hydra configs in ``configs/``; the target is ``frozen.target=<arlm run>``.
"""

from pathlib import Path

from xdllm.model_family import ModelFamily

FAMILY = ModelFamily(
    name="dflash",
    description="DFlash block drafter for speculative decoding of a frozen arlm target "
                "(frozen.target=<arlm run>): decay-weighted block CE, draft-and-verify decoding (greedy or "
                "lossless speculative sampling)",
    config_dir=Path(__file__).parent / "configs",
    frozen_models={"target": "arlm"},
)
