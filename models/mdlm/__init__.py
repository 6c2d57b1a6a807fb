"""MDLM: masked diffusion language model (MDLM / LLaDA style), built from xdllm's shared pieces.

Roles, each in its own module: ``collator`` (prompt/response rows through
:class:`~xdllm.collate.DLLMCollator`, seeded per-sample corruption), ``loss`` (the 1/t-weighted
masked-diffusion bound, normalised by the global count of supervised tokens), ``metrics`` (the
ELBO bound: NLL per token and the perplexity bound, plus exact match), ``predictor``
(ancestral sampling beside the shared engine's confidence modes), ``types``. The network is the
shared bidirectional :class:`~xdllm.nn.RotaryTransformer`; Hydra configs in ``configs/``.
"""

from pathlib import Path

from xdllm.model_family import ModelFamily

FAMILY = ModelFamily(
    name="mdlm",
    description="Masked diffusion LM (MDLM/LLaDA): 1/t-weighted ELBO with global token counts, "
                "ELBO bound metrics, ancestral or confidence-ordered sampling",
    config_dir=Path(__file__).parent / "configs",
)
