"""BD3-LM: block diffusion, autoregressive across blocks and masked diffusion inside each block.

Roles, each in its own module: ``layout`` (block-aligned ``[bos] + prompt + response`` documents
and their per-block noise), ``collator`` (right-padded or packed training rows), ``noise`` (the
per-block masking kernel with a clipped level range), ``two_stream`` (the vectorised
``[x_t | x_0]`` forward under the block-diffusion mask), ``loss`` (the 1/t-weighted bound per
block, or a flat cross-entropy), ``metrics`` (the NELBO / perplexity bound, exact match),
``predictor`` (block-by-block decoding with an exact KV cache of the clean prefix), ``types``.
The network is the shared :class:`~xdllm.nn.RotaryTransformer`; Hydra configs in ``configs/``.
"""

from pathlib import Path

from xdllm.model_family import ModelFamily

FAMILY = ModelFamily(
    name="bd3lm",
    description="Block diffusion (BD3-LM): [x_t | x_0] training under the block-diffusion mask, "
                "per-block noise, NELBO bound, block-by-block decoding with an exact KV cache",
    config_dir=Path(__file__).parent / "configs",
)
