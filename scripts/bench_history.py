"""Overhead of recording denoising history (HistoryTopKPlugin, k=5) during MLM generation.

For each setting, times ``MLMPredictor.predict`` on the same batch three ways:

- ``off``: ``history=None`` (what generation costs without history);
- ``engine``: a recorder whose methods do nothing, i.e. the predictor's own cost of building the
  ``DenoisingStep`` it hands over every step;
- ``topk``: ``HistoryTopKPlugin(k=5)``, including stacking and writing the batch's file;
- ``plugin``: the plugin's own time alone, replaying the recorded calls of one batch (steadier
  than the difference of two noisy end-to-end timings on a shared machine); the JSON splits it
  into ``plugin_steps_s`` (``begin`` and every ``on_step``: device copies) and ``plugin_end_s``
  (``end``: placing the steps, the one copy to the host, writing the file), and of that
  ``plugin_end_write_s``, the file's write alone (its checks and checksums, ``torch.save``,
  ``fsync``): host work that could overlap the next batch, where the rest waits on the device.

``total %`` = (topk - off) / off: what a user pays; ``plugin %`` = plugin / off.

Memory: each of ``off``, ``engine`` and ``topk`` also runs in a fresh subprocess, which reports
its peak resident set size (``VmHWM``, the kernel's high-water mark: it sees every allocation
torch makes) and that peak minus the resident size just before ``predict`` (what generation
itself added); a fresh process keeps one mode's freed-but-cached memory out of another's. The
peak is set by the engine's own step (logits, their float32 copy, the softmax and the previous
step's distributions are alive together), so it also reports, from a second ``predict`` under a
dispatch mode, the bytes of every new tensor torch creates and the largest one: the difference
between modes is what building and recording the history allocates, exactly and without noise.

Settings: ``sort`` is the built-in sort task with the MLM family's default model config
(d_model 128, 4 layers, built-in tokenizer); ``wide`` is a randomly initialised model of a more
realistic size (d_model 512, 8 layers, 8k vocabulary, 32 new tokens in 32 steps); ``long`` is a
small randomly initialised model with a large vocabulary and canvas (d_model 256, 2 layers,
V = 32768, canvas L = 1024: 24 prompt tokens and 1000 new ones in 8 steps), where per-step
vocabulary-sized tensors dominate. Prints two tables, then one JSON line.
``--no-memory`` skips the memory processes (``memory`` is null): the times alone, sooner.
Usage: ``python scripts/bench_history.py [--device cuda] [--settings long] [--repeats N] [--no-memory]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from xdllm.data.tasks import draw_sample, get_task
from xdllm.data.tokenizer import SymbolTokenizer, builtin_tokenizer
from xdllm.history import HistoryTopKPlugin
from xdllm.history import recorder as recorder_module
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
    steps: int


SETTINGS = (
    Setting("sort", d_model=128, n_layers=4, vocab_symbols=None, batch_size=64, prompt_len=8,
            new_tokens=9, steps=9),
    Setting("wide", d_model=512, n_layers=8, vocab_symbols=8188, batch_size=8, prompt_len=32,
            new_tokens=32, steps=32),
    Setting("long", d_model=256, n_layers=2, vocab_symbols=32764, batch_size=4, prompt_len=23,
            new_tokens=1000, steps=8),
)
MODES = ("off", "engine", "topk")


class CapturingRecorder:
    """Keeps every call's arguments, to replay them into a recorder without the model."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.calls: list[tuple[str, tuple]] = []

    def begin(self, batch, canvas, output_start) -> None:
        self.calls.append(("begin", (batch, canvas, output_start)))

    def on_step(self, state) -> None:
        self.calls.append(("on_step", (state,)))

    def end(self, prediction) -> None:
        self.calls.append(("end", (prediction,)))


class TimedFileWrites:
    """Replaces the recorder's ``write_history_file`` while in use, adding up the seconds spent
    in it (the file's checks, checksums, ``torch.save`` and ``fsync``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._original = recorder_module.write_history_file

    def _timed(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self._original(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def __enter__(self) -> TimedFileWrites:
        recorder_module.write_history_file = self._timed
        return self

    def __exit__(self, *exc) -> None:
        recorder_module.write_history_file = self._original


def time_replay(calls, make_history, device: torch.device, repeats: int) -> tuple[float, float, float, float]:
    """Seconds a recorder spends in its own methods over one batch, on the fastest of
    ``repeats`` replays: in all, in ``begin`` and the steps, in ``end``, and in ``end``'s file
    write (the rest of ``end`` places the steps and copies them to the host)."""
    runs = []
    for attempt in range(repeats + 1):
        history = make_history()
        if device.type == "cuda":
            torch.cuda.synchronize()
        with TimedFileWrites() as writes:
            start = time.perf_counter()
            for method, args in calls:
                if method == "end":
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    ending = time.perf_counter()
                getattr(history, method)(*args)
            if device.type == "cuda":
                torch.cuda.synchronize()
            end = time.perf_counter()
        if attempt:
            runs.append((end - start, ending - start, end - ending, writes.seconds))
    return min(runs)


class NullRecorder:
    """Accepts every call and keeps nothing: isolates the predictor's per-step state cost."""

    def __init__(self, k: int) -> None:
        self.k = k

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
    predictor = MLMPredictor(max_steps=setting.steps, max_new_tokens=setting.new_tokens,
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


def make_modes(tokenizer, k: int, out: Path) -> dict:
    """``history`` factories of the three timed modes (``out`` receives the plugin's files)."""

    def plugin() -> HistoryTopKPlugin:
        for old in out.glob("*.pt"):
            old.unlink()
        return HistoryTopKPlugin(k=k, output_dir=out, tokenizer=tokenizer)

    return {"off": lambda: None, "engine": lambda: NullRecorder(k), "topk": plugin}


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_resident_bytes() -> int:
    """``VmHWM``: unlike ``ru_maxrss``, it restarts at ``exec``, so it never counts the memory
    of the (large) parent process this worker was spawned from."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024  # reported in kB


class AllocatedBytes(TorchDispatchMode):
    """Adds up the bytes of every new tensor an operation returns (views and in-place results
    share an input's storage and are not counted) and keeps the largest."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor)}
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() not in inputs:
                size = tensor.untyped_storage().nbytes()
                self.total += size
                self.largest = max(self.largest, size)
        return out


def memory_worker(setting: Setting, mode: str, device: torch.device, k: int) -> None:
    """Two ``predict`` calls in this (fresh) process: the first for the peak resident size, the
    second counting allocations; prints the results as one JSON line."""
    tokenizer, predictor, batch = build(setting, device)
    with tempfile.TemporaryDirectory() as scratch:
        make_history = make_modes(tokenizer, k, Path(scratch))[mode]
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        resident_before = _resident_bytes()
        predictor.predict(batch, history=make_history())
        peak = _peak_resident_bytes()
        with AllocatedBytes() as allocated:
            predictor.predict(batch, history=make_history())
    result = {"peak_rss_mib": peak / 2**20,
              "predict_added_mib": (peak - resident_before) / 2**20}
    if device.type == "cuda":
        result["cuda_peak_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    result["allocated_mib"] = allocated.total / 2**20
    result["largest_tensor_mib"] = allocated.largest / 2**20
    print(json.dumps(result))


def measure_memory(setting: Setting, mode: str, args: argparse.Namespace) -> dict:
    """Run :func:`memory_worker` in a fresh interpreter and return what it reports."""
    command = [sys.executable, __file__, "--memory-worker", setting.name, mode,
               "--device", args.device, "--k", str(args.k)]
    if args.threads is not None:
        command += ["--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"memory worker {setting.name}/{mode} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_setting(setting: Setting, args: argparse.Namespace, device: torch.device,
                  scratch: Path) -> dict:
    """Times (in this process) and peak memory (one subprocess per mode) of one setting."""
    tokenizer, predictor, batch = build(setting, device)
    out = scratch / setting.name
    modes = make_modes(tokenizer, args.k, out)
    best = time_modes(predictor, batch, modes, device, args.repeats)
    off, engine, topk = best["off"], best["engine"], best["topk"]
    capture = CapturingRecorder(args.k)
    predictor.predict(batch, history=capture)
    replay, replay_steps, replay_end, replay_write = time_replay(capture.calls, modes["topk"], device, args.repeats)
    del capture
    memory = None if args.no_memory else {mode: measure_memory(setting, mode, args) for mode in MODES}
    return {
        "setting": setting.name, "device": str(device), "batch": setting.batch_size,
        "canvas_len": int(batch["input_ids"].shape[1]) + setting.new_tokens,
        "new_tokens": setting.new_tokens, "steps": setting.steps,
        "vocab": tokenizer.vocab_size, "k": args.k,
        "off_s": off, "engine_states_s": engine, "topk_s": topk, "plugin_replay_s": replay,
        "plugin_steps_s": replay_steps, "plugin_end_s": replay_end, "plugin_end_write_s": replay_write,
        "overhead_total_pct": 100 * (topk - off) / off,
        "overhead_plugin_pct": 100 * replay / off,
        "file_mb_per_batch": sum(p.stat().st_size for p in out.glob("*.pt")) / 2**20,
        "memory": memory,
    }


def print_row(r: dict) -> None:
    print(f"{r['setting']:8} {r['device']:6} {r['off_s']:8.4f} {r['engine_states_s']:10.4f} "
          f"{r['topk_s']:9.4f} {r['plugin_replay_s']:9.4f} {r['overhead_total_pct']:8.1f} "
          f"{r['overhead_plugin_pct']:9.1f} {r['file_mb_per_batch']:8.2f}", flush=True)


def print_memory(results: list[dict]) -> None:
    print("\nMiB per predict, fresh process per mode: peak RSS (added by predict); "
          "allocated in all (largest tensor)")
    print(f"{'setting':8} {'mode':6} {'peak RSS':>9} {'(added)':>9} {'allocated':>10} "
          f"{'(largest)':>10}")
    for r in results:
        for mode in MODES:
            m = r["memory"][mode]
            print(f"{r['setting']:8} {mode:6} {m['peak_rss_mib']:9.0f} {m['predict_added_mib']:9.0f} "
                  f"{m['allocated_mib']:10.0f} {m['largest_tensor_mib']:10.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--settings", nargs="*", default=[s.name for s in SETTINGS])
    parser.add_argument("--no-memory", action="store_true",
                        help="time only: no fresh process per mode for the memory figures (a short GPU lease)")
    parser.add_argument("--memory-worker", nargs=2, metavar=("SETTING", "MODE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_grad_enabled(False)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    by_name = {s.name: s for s in SETTINGS}
    if args.memory_worker:
        name, mode = args.memory_worker
        memory_worker(by_name[name], mode, device, args.k)
        return
    results = []
    print(f"{'setting':8} {'device':6} {'off s':>8} {'+states s':>10} {'+topk s':>9} "
          f"{'plugin s':>9} {'total %':>8} {'plugin %':>9} {'file MB':>8}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.settings:
            results.append(bench_setting(by_name[name], args, device, Path(scratch)))
            print_row(results[-1])
    if not args.no_memory:
        print_memory(results)
    print(json.dumps({"benchmark": "history_overhead", "threads": torch.get_num_threads(),
                      "results": results}))


if __name__ == "__main__":
    main()
