"""Operations torch runs for one forward pass and one training step of the rotary transformer.

On a GPU each operation is (at least) one kernel launch, and generating with a small model waits
on launches more than on arithmetic: the count is what a change to the layers saves there, and
unlike a time it is exact on any machine. Counted with a dispatch mode (every ATen operation,
views included), after a warm-up pass, for a forward pass without gradients (generation) and a
forward, loss and backward with them (a training step, optimizer excluded).

Usage: ``python scripts/count_forward_ops.py`` (the demo's model, 64 rows of 18 tokens, and a
wider one, 8 rows of 64 tokens), or ``--d-model 256 --layers 4 --heads 4 --rows 8 --seq-len 128``
for one configuration; ``--bf16`` under bf16 autocast. Prints one JSON line per configuration.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from xdllm.nn import RotaryTransformer, RotaryTransformerConfig

DEFAULT_CONFIGS = (  # (d_model, layers, heads, rows, seq_len)
    (128, 4, 4, 64, 18),
    (512, 8, 8, 8, 64),
)


class OperationCount(TorchDispatchMode):
    """Counts every ATen operation run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def counted_operations(run: Callable[[], object]) -> int:
    """Operations of one call of ``run``, after a warm-up call."""
    run()
    with OperationCount() as counter:
        run()
    return counter.count


def count(d_model: int, layers: int, heads: int, rows: int, seq_len: int, bf16: bool) -> dict[str, object]:
    torch.manual_seed(0)
    model = RotaryTransformer(RotaryTransformerConfig(vocab_size=64, d_model=d_model, n_layers=layers, n_heads=heads,
                                                      max_positions=max(seq_len, 16)))
    ids = torch.randint(0, 64, (rows, seq_len))
    precision = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    def forward() -> None:
        with torch.no_grad(), precision:
            model(ids)

    def training_step() -> None:
        with precision:
            model(ids).float().square().mean().backward()

    return {"bench": "forward_ops", "d_model": d_model, "layers": layers, "heads": heads, "rows": rows,
            "seq_len": seq_len, "bf16": bf16, "forward_ops": counted_operations(forward),
            "training_step_ops": counted_operations(training_step)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--bf16", action="store_true", help="under bf16 autocast (the GPU default)")
    args = parser.parse_args(argv)
    configs = DEFAULT_CONFIGS if args.d_model is None else (
        (args.d_model, args.layers, args.heads, args.rows, args.seq_len),)
    for config in configs:
        print(json.dumps(count(*config, bf16=args.bf16)))


if __name__ == "__main__":
    main()
