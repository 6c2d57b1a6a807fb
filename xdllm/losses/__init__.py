"""dLLM training losses; formulas and denominators in ``docs/losses.md``.

Every loss returns a :class:`DLLMLossOutput`.
"""

from xdllm.losses.block_diffusion import BlockDiffusionCrossEntropyLoss
from xdllm.losses.chunked import chunked_token_nll, projects_in_chunks, supervised_token_nll
from xdllm.losses.dflash import DFlashDecayLoss
from xdllm.losses.encoder_ar import encoder_ar_loss
from xdllm.losses.hybrid import HybridDiffusionLLMLoss
from xdllm.losses.mdlm import MDLMCrossEntropyLoss
from xdllm.losses.output import DLLMLossOutput
from xdllm.losses.token_nll import per_token_nll

__all__ = [
    "BlockDiffusionCrossEntropyLoss",
    "DFlashDecayLoss",
    "DLLMLossOutput",
    "HybridDiffusionLLMLoss",
    "MDLMCrossEntropyLoss",
    "chunked_token_nll",
    "encoder_ar_loss",
    "per_token_nll",
    "projects_in_chunks",
    "supervised_token_nll",
]
