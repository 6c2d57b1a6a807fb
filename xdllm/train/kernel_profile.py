"""Where a training step's time goes: the kernels (on a GPU) or operators (on the CPU) of a few
profiled steps, grouped by kind (matrix products, attention, the loss, norms, casts and copies,
other elementwise work, the optimizer; on the CPU also the host-only work of views and
allocations), for ``bench_gpu_training.py --profile``."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

KINDS = (
    ("matmul", ("triton_tem_fused_mm", "triton_tem_fused_addmm", "triton_tem_fused_bmm")),  # compiled products
    ("attention", ("flex", "flash", "attention", "fmha", "triton_tem", "sdpa")),  # other templates: flex
    ("matmul", ("gemm", "aten::mm", "aten::bmm", "aten::addmm", "cutlass", "xmma", "nvjet")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("loss", ("softmax", "nll", "cross_entropy", "logsumexp")),
    ("norm", ("norm", "rsqrt")),
    ("cast_copy", ("copy", "memcpy", "convert", "cast", "clone", "contiguous")),
    ("elementwise", ("elementwise", "vectorized", "triton_poi", "triton_red", "triton_per", "mul", "add", "sub",
                     "div", "pow", "sqrt", "exp", "log", "neg", "gelu", "where", "fill", "cat", "sum", "mean",
                     "reduce", "lerp", "eq", "lt", "gt", "ne", "bitwise", "clamp", "max", "min", "index",
                     "scatter", "gather", "embedding", "arange", "nonzero", "masked")),
)
"""Each kind and the name fragments that put a kernel in it, the first match winning (so a
copy kernel, an ``elementwise_kernel<direct_copy...>``, is a copy, and a compiled matrix
product's Triton template is no attention); :data:`HOST_ONLY` are
``host``; ``other`` for the rest."""
HOST_ONLY = frozenset(f"aten::{name}" for name in (
    "view", "_unsafe_view", "as_strided", "t", "transpose", "permute", "reshape", "slice", "select", "expand",
    "unbind", "narrow", "split", "chunk", "unsqueeze", "squeeze", "flatten", "detach", "alias", "lift_fresh",
    "empty", "empty_strided", "empty_like", "to", "linear", "matmul"))
"""CPU operators whose own time is no arithmetic: views, allocation, dispatch to other operators."""


def kernel_kind(name: str) -> str:
    """The kind of a kernel or operator ``name`` (see :data:`KINDS`)."""
    if name in HOST_ONLY:
        return "host"
    lowered = name.lower()
    for kind, fragments in KINDS:
        if any(fragment in lowered for fragment in fragments):
            return kind
    return "other"


def profile_steps(step: Callable[[], None], steps: int, device: torch.device, top: int = 12) -> dict:
    """Run ``step`` ``steps`` times under the profiler: milliseconds per step of all kernels (or
    operators, by their own time), each kind's share, and the ``top`` kernels."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with profile(activities=activities) as profiler:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize(device)
    times = {}
    for event in profiler.key_averages():
        own = event.self_device_time_total if cuda else event.self_cpu_time_total
        if own > 0 and (cuda or event.key.startswith("aten::")):
            times[event.key] = times.get(event.key, 0.0) + own
    total = sum(times.values()) or 1.0
    kinds: dict[str, float] = {}
    for name, own in times.items():
        kinds[kernel_kind(name)] = kinds.get(kernel_kind(name), 0.0) + own / total
    ranked = sorted(times.items(), key=lambda item: -item[1])[:top]
    return {"steps": steps, "timed": "device kernels" if cuda else "CPU operators (own time)",
            "ms_per_step": total / 1000 / steps,
            "kinds": dict(sorted(kinds.items(), key=lambda item: -item[1])),
            "top": [{"name": name[:120], "kind": kernel_kind(name), "share": own / total} for name, own in ranked]}
