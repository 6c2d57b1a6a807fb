"""A response's exact NLL under a causal network: the likelihood of the families whose networks
hold a causal language model of the clean row beside their diffusion part (hybrid's causal
branch, UDLM's encoder). In their training forward the clean row's tokens see only clean tokens
before them, so a causal forward of the row alone gives the same next-token distributions, at
the cost of one forward over the row instead of the joint one."""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Integer
from torch import Tensor, nn

from xdllm.losses.chunked import DEFAULT_CHUNK_SIZE, supervised_token_nll


def causal_response_nll(
    model: nn.Module,
    ids: Integer[Tensor, "batch seq_len"],
    counted: Bool[Tensor, "batch seq_len"],
    attention_mask: Bool[Tensor, "batch seq_len"],
    positions: Integer[Tensor, "batch seq_len"],
) -> tuple[Float[Tensor, " batch"], Integer[Tensor, " batch"]]:
    """Each row's NLL (nats, float64) of its ``counted`` tokens, token ``i`` read from the causal
    forward's state at ``i - 1`` (``model.final_hidden`` under its default, causal rule, projected
    by ``model.lm_head_weight`` chunk by chunk: no ``[tokens, vocab]`` float32 logits), and how
    many tokens each row counted. A counted first column has nothing before it to be read from."""
    if bool(counted[:, 0].any()):
        raise ValueError("causal_response_nll: a counted token in the first column has no state before it")
    hidden = model.final_hidden(ids, attention_mask=attention_mask, positions=positions)
    predicted = counted[:, 1:]
    nll = supervised_token_nll(hidden[:, :-1], model.lm_head_weight, ids[:, 1:], predicted, DEFAULT_CHUNK_SIZE)
    rows = predicted.nonzero()[:, 0]
    per_row = torch.zeros(ids.shape[0], dtype=torch.float64, device=ids.device).index_add_(0, rows, nll.double())
    return per_row, predicted.sum(1)
