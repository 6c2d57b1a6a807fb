"""Overhead of recording denoising history (HistoryTopKPlugin, k=5) during MLM generation.

For each setting, times ``MLMPredictor.predict`` on the same batch three ways:

- ``off``: ``history=None`` (what generation costs without history);
- ``engine``: a recorder whose methods do nothing, i.e. the predictor's own cost of building a
  ``DenoisingStep`` (full-canvas probabilities) every step;
- ``topk``: ``HistoryTopKPlugin(k=5)``, including stacking and writing the batch's file;
- ``plugin``: the plugin's own time alone, replaying the recorded calls of one batch (steadier
  than the difference of two noisy end-to-end timings on a shared machine).

``total %`` = (topk - off) / off: what a user pays; ``plugin %`` = plugin / off.

Settings: ``sort`` is the built-in sort task with the MLM family's default model config
(d_model 128, 4 layers, built-in tokenizer); ``wide`` is a randomly initialised model of a more
realistic size (d_model 512, 8 layers, 8k vocabulary, 32 new tokens in 32 steps).
Prints a table, then one JSON line. Usage: ``python scripts/bench_history.py [--device cuda]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from xdllm.data.tasks import draw_sample, get_task
from xdllm.data.tokenizer import SymbolTokenizer, builtin_tokenizer
from xdllm.history import HistoryTopKPlugin
from xdllm_models.mlm.collator import MLMSeq2SeqPredCollator
from xdllm_models.mlm.model import RotaryTransformerMLMModel
from xdllm_models.mlm.predictor import MLMPredictor


@dataclass(frozen=True)
class Setting:
    name: str
    d_model: int
    n_layers: int
    vocab_symbols: int | None  # None: the built-in tokenizer and the sort task
    batch_size: int
    prompt_len: int
    new_tokens: int


SETTINGS = (
    Setting("sort", d_model=128, n_layers=4, vocab_symbols=None, batch_size=64, prompt_len=8,
            new_tokens=9),
    Setting("wide", d_model=512, n_layers=8, vocab_symbols=8188, batch_size=8, prompt_len=32,
            new_tokens=32),
)


class CapturingRecorder:
    """Keeps every call's arguments, to replay them into a recorder without the model."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def begin(self, batch, canvas, output_start) -> None:
        self.calls.append(("begin", (batch, canvas, output_start)))

    def on_step(self, state) -> None:
        self.calls.append(("on_step", (state,)))

    def end(self, prediction) -> None:
        self.calls.append(("end", (prediction,)))


def time_replay(calls, make_history, device: torch.device, repeats: int) -> float:
    """Fastest seconds a recorder spends in its own methods over one batch."""
    times = []
    for attempt in range(repeats + 1):
        history = make_history()
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for method, args in calls:
            getattr(history, method)(*args)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if attempt:
            times.append(time.perf_counter() - start)
    return min(times)


class NullRecorder:
    """Accepts every call and keeps nothing: isolates the predictor's per-step state cost."""

    def begin(self, batch, canvas, output_start) -> None:
        pass

    def on_step(self, state) -> None:
        pass

    def end(self, prediction) -> None:
        pass


def build(setting: Setting, device: torch.device):
    """Tokenizer, model, predictor and one prediction batch for ``setting``."""
    generator = torch.Generator().manual_seed(0)
    if setting.vocab_symbols is None:
        tokenizer = builtin_tokenizer()
        task = get_task("sort", length=setting.prompt_len)
        pairs = [draw_sample(task, "test", i, seed=0) for i in range(setting.batch_size)]
        examples = [{"prompt_ids": tokenizer.encode(" ".join(p)),
                     "target_ids": tokenizer.encode(" ".join(t)), "sample_index": i, "step": 0}
                    for i, (p, t) in enumerate(pairs)]
    else:
        tokenizer = SymbolTokenizer([f"t{i}" for i in range(setting.vocab_symbols)])
        prompts = torch.randint(4, tokenizer.vocab_size, (setting.batch_size, setting.prompt_len),
                                generator=generator)
        examples = [{"prompt_ids": row, "target_ids": [], "sample_index": i, "step": 0}
                    for i, row in enumerate(prompts.tolist())]
    batch = MLMSeq2SeqPredCollator(tokenizer)(examples)
    batch = {key: value.to(device) for key, value in batch.items()}
    torch.manual_seed(0)
    model = RotaryTransformerMLMModel(tokenizer.vocab_size, d_model=setting.d_model,
                                      n_layers=setting.n_layers, n_heads=max(1, setting.d_model // 64),
                                      attn_backend="sdpa").to(device).eval()
    predictor = MLMPredictor(max_steps=setting.new_tokens, max_new_tokens=setting.new_tokens,
                             tokenizer=tokenizer, model=model, confidence="top_prob")
    return tokenizer, predictor, batch


def time_modes(predictor, batch, modes: dict, device: torch.device, repeats: int) -> dict:
    """Fastest seconds of one ``predict`` call per mode, modes interleaved round-robin after a
    warm-up, so that load from other processes hits every mode alike (the minimum is the
    least disturbed run)."""
    times: dict[str, list[float]] = {name: [] for name in modes}
    for attempt in range(repeats + 1):
        for name, make_history in modes.items():
            history = make_history()
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            predictor.predict(batch, history=history)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if attempt:
                times[name].append(time.perf_counter() - start)
    return {name: min(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--settings", nargs="*", default=[s.name for s in SETTINGS])
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_grad_enabled(False)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    results = []
    print(f"{'setting':8} {'device':6} {'off s':>8} {'+states s':>10} {'+topk s':>9} "
          f"{'plugin s':>9} {'total %':>8} {'plugin %':>9} {'file MB':>8}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        for setting in (s for s in SETTINGS if s.name in args.settings):
            tokenizer, predictor, batch = build(setting, device)
            out = Path(scratch) / setting.name

            def plugin() -> HistoryTopKPlugin:
                for old in out.glob("*.pt"):
                    old.unlink()
                return HistoryTopKPlugin(k=args.k, output_dir=out, tokenizer=tokenizer)

            best = time_modes(predictor, batch, {"off": lambda: None, "engine": NullRecorder,
                                                 "topk": plugin}, device, args.repeats)
            off, engine, topk = best["off"], best["engine"], best["topk"]
            capture = CapturingRecorder()
            predictor.predict(batch, history=capture)
            replay = time_replay(capture.calls, plugin, device, args.repeats)
            r = {
                "setting": setting.name, "device": str(device), "batch": setting.batch_size,
                "steps": setting.new_tokens, "vocab": tokenizer.vocab_size, "k": args.k,
                "off_s": off, "engine_states_s": engine, "topk_s": topk,
                "plugin_replay_s": replay,
                "overhead_total_pct": 100 * (topk - off) / off,
                "overhead_plugin_pct": 100 * replay / off,
                "file_mb_per_batch": sum(p.stat().st_size for p in out.glob("*.pt")) / 2**20,
            }
            results.append(r)
            print(f"{r['setting']:8} {r['device']:6} {off:8.4f} {engine:10.4f} {topk:9.4f} "
                  f"{replay:9.4f} "
                  f"{r['overhead_total_pct']:8.1f} {r['overhead_plugin_pct']:9.1f} "
                  f"{r['file_mb_per_batch']:8.2f}", flush=True)
    print(json.dumps({"benchmark": "history_overhead", "results": results}))


if __name__ == "__main__":
    main()
