"""A network always run under the causal mask rule: the reference an annealed loss at its first
step (every later key hidden) must equal."""

import torch

from xdllm.nn import CausalMask


class UnderCausalRule(torch.nn.Module):
    """``network`` with ``mask_rule=CausalMask()`` added to every forward and ``final_hidden``."""

    def __init__(self, network: torch.nn.Module) -> None:
        super().__init__()
        self.network = network
        self.lm_head_weight = network.lm_head_weight

    def forward(self, *args, **kwargs):
        return self.network(*args, **kwargs, mask_rule=CausalMask())

    def final_hidden(self, *args, **kwargs):
        return self.network.final_hidden(*args, **kwargs, mask_rule=CausalMask())
