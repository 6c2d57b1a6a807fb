"""``MLMPredictor``: the core unmasking engine, as the MLM family uses it.

The MLM family needs nothing beyond the shared engine. The subclass gives Hydra configs a
family-local target, ``xdllm_models.mlm.predictor.MLMPredictor``, and a place for MLM-specific
behaviour should it ever be needed.
"""

from __future__ import annotations

from xdllm.predict.engine import UnmaskingPredictor


class MLMPredictor(UnmaskingPredictor):
    """Confidence-ordered iterative unmasking for masked language models.

    Options and their exact semantics: :class:`xdllm.predict.engine.UnmaskingPredictor` and
    ``docs/predictor.md``.
    """
