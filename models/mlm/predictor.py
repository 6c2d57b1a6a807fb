"""``MLMPredictor`` (seed 004): the core unmasking engine, as the MLM family uses it.

The MLM family needs nothing beyond the shared engine, whose signature already is seed 004's
(``max_steps, max_new_tokens, tokenizer, model, noise_schedule, top_k, top_p, confidence,
threshold, skip_special_tokens`` with the seed's defaults, then xdllm's ``temperature,
block_size, stop_at_eos, seed``). The subclass gives Hydra configs a family-local target,
``xdllm_models.mlm.predictor.MLMPredictor``, and a place for MLM-specific behaviour should it
ever be needed.
"""

from __future__ import annotations

from xdllm.predict.engine import UnmaskingPredictor


class MLMPredictor(UnmaskingPredictor):
    """Confidence-ordered iterative unmasking for masked language models.

    Options and their exact semantics: :class:`xdllm.predict.engine.UnmaskingPredictor` and
    ``docs/predictor.md``.
    """
