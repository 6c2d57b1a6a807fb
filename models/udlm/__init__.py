"""UDLM: uniform-noise block diffusion with an autoregressive encoder.

Roles, each in its own module: ``masks`` (one training forward over ``[canvas | encoder row]``:
the encoder row is causal, the canvas sees itself and the clean blocks before it), ``model``
(the shared rotary transformer, causal by default, with the canvas pass beside it), ``collator``
(response windows from :class:`~xdllm.collate.DLLMCollator`, one canvas block per example
drawn from the sample's seed, uniform random-token noise at one level per example), ``loss``
(flat cross-entropy over the whole supervised canvas plus the weighted encoder next-token term,
over the step's global counts), ``metrics`` (the loss terms, exact match), ``predictor``
(block by block over a KV cache of the encoder: each block starts as uniform random tokens and
every step re-predicts every position, until the block stops changing or is confident),
``types``. ``xdllm history revisions`` (:mod:`xdllm.history.revisions`) counts how often a
revised token fixed an error, from the history files.
Hydra configs in ``configs/``.
"""

from pathlib import Path

from xdllm.model_family import ModelFamily

FAMILY = ModelFamily(
    name="udlm",
    description="Uniform-noise block diffusion with a causal encoder: one canvas block per example, "
                "random-token noise, flat CE + encoder AR loss; block decoding with revisions",
    config_dir=Path(__file__).parent / "configs",
)
