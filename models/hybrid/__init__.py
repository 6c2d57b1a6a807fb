"""Hybrid: one network with a diffusion branch and an autoregressive branch (block diffusion + AR).

Roles, each in its own module: ``masks`` (the ``[x_t | x_0]`` training mask: noisy blocks see
themselves and the clean blocks before them, the clean half is causal), ``layout`` (RoPE
positions that put every response on a block boundary), ``model`` (the shared rotary
transformer, causal by default, with both branches in one forward), ``collator`` (MDLM's rows
with block-wise noise, plus the block-aligned positions), ``loss`` (``alpha · diffusion + AR``
over the step's global token counts), ``metrics`` (the causal branch's exact NLL and perplexity,
exact match), ``predictor`` (causal prefill into a KV cache; per block a causal seed token, a
diffusion fill with a confidence threshold, then the block appended to the cache), ``types``.
Hydra configs in ``configs/``.
"""

from pathlib import Path

from xdllm.model_family import ModelFamily

FAMILY = ModelFamily(
    name="hybrid",
    description="Hybrid block diffusion + AR on one network: [x_t | x_0] training with "
                "alpha · diffusion + AR loss; KV-cache decoding, causal seed + diffusion fill per block",
    config_dir=Path(__file__).parent / "configs",
)
