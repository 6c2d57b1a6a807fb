"""Cross-entropy on the supervised positions only, without ``[tokens, vocab]`` float32 logits.

The plain path projects every position to the vocabulary (``[B, L, V]`` logits, in bf16 under
autocast), upcasts all of them to float32 and takes the cross-entropy: at ``B·L = 16384`` tokens
and ``V = 32768`` that is 2 GiB of float32 logits, as much again for the softmax saved for
backward, and the LM-head FLOPs of every unsupervised position. Here the network's last hidden
states are gathered at the supervised positions first (``[N, d_model]``), then projected and
scored ``chunk_size`` positions at a time, each chunk under activation checkpointing: at most one
``[chunk_size, V]`` block of logits exists at once, in the forward and in the backward pass.
Values and gradients are those of the plain path (``tests/losses/test_chunked_nll.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Integer
from torch import Tensor
from torch.utils.checkpoint import checkpoint

DEFAULT_CHUNK_SIZE = 2048


def _chunk_nll(hidden: Tensor, weight: Tensor, targets: Tensor) -> Tensor:
    """Float32 NLL of one chunk: project, upcast, cross-entropy (logits freed on return)."""
    return F.cross_entropy(F.linear(hidden, weight).float(), targets, reduction="none")


def chunked_token_nll(
    hidden: Float[Tensor, "tokens dim"],
    weight: Float[Tensor, "vocab dim"],
    targets: Integer[Tensor, " tokens"],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> Float[Tensor, " tokens"]:
    """``-log softmax(hidden @ weight.T)[targets]`` in float32, ``chunk_size`` rows at a time.

    Each chunk runs under ``torch.utils.checkpoint`` where autograd records it: autograd keeps
    only its inputs and recomputes its logits in backward. Without a graph to record (validation,
    ``xdllm eval``) the chunks run as they are: nothing is kept either way, and checkpointing's
    first call would load ``torch._dynamo`` (about half a second).
    """
    if chunk_size < 1:
        raise ValueError(f"chunked_token_nll: chunk_size must be >= 1, got {chunk_size}")
    records = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    chunks = [checkpoint(_chunk_nll, hidden_chunk, weight, target_chunk, use_reentrant=False) if records
              else _chunk_nll(hidden_chunk, weight, target_chunk)
              for hidden_chunk, target_chunk in zip(hidden.split(chunk_size), targets.split(chunk_size))]
    return torch.cat(chunks)


def projects_in_chunks(model: torch.nn.Module, chunk_size: int | None) -> bool:
    """Whether a loss can take the chunked path: a chunk size is set and the model exposes
    ``final_hidden`` (what its LM head reads) and ``lm_head_weight``."""
    return chunk_size is not None and hasattr(model, "final_hidden") and hasattr(model, "lm_head_weight")


def supervised_token_nll(
    hidden: Float[Tensor, "batch seq_len dim"],
    weight: Float[Tensor, "vocab dim"],
    targets: Integer[Tensor, "batch seq_len"],
    supervised: Bool[Tensor, "batch seq_len"],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    scale: Float[Tensor, "batch seq_len"] | None = None,
) -> Float[Tensor, " supervised"]:
    """The float32 NLL of ``targets`` at the ``supervised`` positions only, in the order of
    ``values[supervised]`` (row-major); times ``scale`` at the same positions when given
    (MDLM's ``1 / t``), gathered with the same index.

    Finding the positions costs one host synchronisation (their number fixes the shapes).
    """
    index = supervised.reshape(-1).nonzero().squeeze(1)
    rows = hidden.reshape(-1, hidden.shape[-1]).index_select(0, index)
    nll = chunked_token_nll(rows, weight, targets.reshape(-1).index_select(0, index), chunk_size)
    if scale is None:
        return nll
    return nll * scale.reshape(-1).index_select(0, index).to(nll.dtype)
