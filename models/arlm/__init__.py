"""ARLM: the autoregressive baseline, on the same rotary transformer as the diffusion families.

Roles, each in its own module: ``model`` (the shared :class:`~xdllm.nn.RotaryTransformer` with
the causal mask rule by default, per document in packed rows), ``collator`` (``[bos] + prompt +
target + [eos]`` rows, one per sample or packed), ``loss`` (next-token cross-entropy on the
supervised tokens, over the global count of supervised tokens), ``metrics`` (exact match and
token accuracy of generated answers; the NLL per token and perplexity), ``predictor``
(left-to-right decoding with a KV cache: greedy, temperature, top-k, top-p, stop at EOS),
``types``. Hydra configs in ``configs/``.
"""

from pathlib import Path

from xdllm.model_family import ModelFamily

FAMILY = ModelFamily(
    name="arlm",
    description="Autoregressive LM baseline: causal rotary transformer, next-token CE, "
                "KV-cache decoding (greedy, temperature, top-k, top-p), NLL/perplexity metrics",
    config_dir=Path(__file__).parent / "configs",
)
