"""Iterative unmasking: one vectorised engine with pluggable parts.

- ``engine.UnmaskingPredictor``: the loop (model families configure it, see ``models/mlm``);
- ``canvas``: continuation / infilling canvases from a prediction batch;
- ``sampling``: final distribution and token choice; ``confidence``: position scores;
- ``unmask_count``: how many positions per step and which; ``blocks``: semi-AR block policy;
- ``stopping``: optional EOS stop; ``streams``: per-sample counter-based randomness;
- ``metrics``: exact match / token accuracy of output regions; ``text``: region decoding.
"""

from xdllm.predict.engine import UnmaskingPredictor
from xdllm.predict.metrics import RegionMatch, match_output_regions

__all__ = ["RegionMatch", "UnmaskingPredictor", "match_output_regions"]
