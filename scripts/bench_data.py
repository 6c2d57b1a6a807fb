"""Prepared data at scale: preparation throughput, training memory vs corpus size, loader speed.

1. Generates a local text corpus of ``--size-mb`` MB under a temporary folder (one document per
   line: 20-400 words drawn Zipf-like from 5,000 random letter strings), and a corpus a tenth
   of its size (its first lines). Trains a byte-level BPE tokenizer (``--vocab`` tokens, with
   xdllm's special tokens) on the first few MB.
2. ``xdllm data prepare`` of both with ``--workers`` processes: MB of source text per second.
3. Trains on each prepared corpus in a fresh process (``xdllm train task=prepared``, the MLM
   family, packed rows, ``--steps`` steps): that process's peak resident memory (``ru_maxrss``),
   and at the end its anonymous and file-backed resident memory.
4. In this process: the tokenizer alone, encoding the first 4 MB line by line and in batches
   of 1,024 lines (``encode_batch``, as a preparation worker does: what one worker cannot
   beat); the training loader's tokens per second (collated packed batches) against the tokens
   per second one training step consumes (forward, loss, backward, AdamW on batches collated
   beforehand).

``--prepare-only`` stops after step 2 and the tokenizer alone. Deletes the temporary folder at
the end (``--keep`` keeps it). Prints one JSON line.

    OMP_NUM_THREADS=1 python scripts/bench_data.py              # 300 MB and 30 MB corpora
    OMP_NUM_THREADS=1 python scripts/bench_data.py --size-mb 30 --workers 1 --prepare-only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TRAIN_OPTIONS = ["model=mlm", "collator=packed_mlm", "collator.train.row_length=256", "collator.val.row_length=256",
                 "model.max_positions=512", "data.batch_size=16", "data.num_val_samples=8",
                 "data.num_test_samples=0", "data.validation_roles=[loss]", "checkpoint.monitor=val/loss",
                 "checkpoint.mode=min", "history.num_samples=0", "generate_after_train=false", "progress=lines",
                 "trainer.enable_model_summary=false"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=300.0, help="the larger corpus; the smaller is a tenth")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--max-tokens", type=int, default=256, help="prepare: longer documents are cut")
    parser.add_argument("--steps", type=int, default=10, help="training steps per memory run")
    parser.add_argument("--loader-steps", type=int, default=10, help="steps timed for the loader and training")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of the training runs and the timed steps (more than the free cores "
                             "makes OpenMP spin: measured 12 s per step with 2 threads on a loaded 2-core machine)")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a new folder under /tmp")
    parser.add_argument("--keep", action="store_true", help="keep the generated corpora and prepared data")
    parser.add_argument("--prepare-only", action="store_true", help="no training runs: preparation and the "
                        "tokenizer alone")
    return parser.parse_args()


def write_corpus(path: Path, size_bytes: int, seed: int = 0) -> int:
    """Documents of random words until ``size_bytes``; returns the number of lines."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    words = np.array([letters[rng.integers(0, 26, rng.integers(2, 10))].tobytes().decode() for _ in range(5000)])
    weights = 1.0 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    written = lines = 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < size_bytes:
            lengths = rng.integers(20, 400, 2000)
            drawn = words[rng.choice(len(words), int(lengths.sum()), p=weights)]
            ends = np.cumsum(lengths)
            block = "\n".join(" ".join(drawn[end - length:end]) + "." for end, length in zip(ends, lengths)) + "\n"
            handle.write(block)
            written += len(block)
            lines += len(lengths)
    return lines


def write_head(source: Path, target: Path, size_bytes: int) -> None:
    """The first whole lines of ``source`` up to about ``size_bytes``."""
    with open(source, "rb") as reader, open(target, "wb") as writer:
        writer.write(reader.read(size_bytes) + reader.readline())


def train_tokenizer(corpus: Path, target: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from xdllm.data.tokenizer import SPECIAL_TOKENS

    with open(corpus, encoding="utf-8") as handle:
        sample = [handle.readline() for _ in range(4000)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(sample, trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=list(SPECIAL_TOKENS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tokenizer.save(str(target))


def tokenizer_alone(corpus: Path, tokenizer: Path, size_bytes: int = 4_000_000, batch: int = 1024
                    ) -> dict[str, float]:
    """MB/s of one process encoding the corpus's first lines with the tokenizer, nothing else:
    line by line, and ``batch`` lines per ``encode_batch`` call."""
    from xdllm.data.tokenizer import load_tokenizer

    with open(corpus, encoding="utf-8") as handle:
        lines = handle.read(size_bytes).splitlines()
    megabytes = sum(len(line.encode()) + 1 for line in lines) / 1e6
    encoder = load_tokenizer(tokenizer)
    started = time.perf_counter()
    for line in lines:
        encoder.encode(line)
    line_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for start in range(0, len(lines), batch):
        encoder.encode_batch(lines[start:start + batch])
    batch_seconds = time.perf_counter() - started
    return {"line_by_line": round(megabytes / line_seconds, 3), "batched": round(megabytes / batch_seconds, 3)}


def prepare_corpus(source: Path, output: Path, tokenizer: Path, workers: int, max_tokens: int) -> dict:
    from xdllm.data.prepare import PrepareOptions, prepare

    return prepare(PrepareOptions(inputs=[source], output=output, tokenizer=str(tokenizer), workers=workers,
                                  val_fraction=0.01, test_fraction=0.0, max_tokens=max_tokens))


MEMORY_PROBE = """
import json, resource, sys
from xdllm.cli.main import main
code = main(sys.argv[1:])
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
kib = lambda key: int(status[key].split()[0])
print(json.dumps({"code": code, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rss_anon_mb": kib("RssAnon") / 1024, "rss_file_mb": kib("RssFile") / 1024}))
"""


def training_memory(prepared: Path, tokenizer: Path, run_dir: Path, steps: int, threads: int) -> dict:
    """Peak and final resident memory of a fresh training process on ``prepared``."""
    command = [sys.executable, "-c", MEMORY_PROBE, "train", "task=prepared", f"task.params.path={prepared}",
               f"tokenizer={tokenizer}", *TRAIN_OPTIONS, f"trainer.max_steps={steps}",
               f"trainer.val_check_interval={steps}", f"torch_threads={threads}", f"run_dir={run_dir}"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"training run failed:\n{result.stderr[-3000:]}")
    memory = json.loads(result.stdout.strip().splitlines()[-1])
    if memory["code"] != 0:
        raise SystemExit(f"training run returned {memory['code']}:\n{result.stderr[-3000:]}")
    return memory


def loader_and_step_throughput(prepared: Path, tokenizer: Path, steps: int, threads: int) -> dict:
    """Tokens per second: the training loader alone, and training steps on collated batches."""
    import torch

    from xdllm.config.compose import compose_config
    from xdllm.run.build import build_components, build_datamodule

    torch.set_num_threads(threads)
    config = compose_config("train", ["task=prepared", f"task.params.path={prepared}", f"tokenizer={tokenizer}",
                                      *TRAIN_OPTIONS])
    components = build_components(config)
    datamodule = build_datamodule(components)
    datamodule.max_steps = steps
    started = time.perf_counter()
    batches = [batch for micro_batches in datamodule.train_dataloader() for batch in micro_batches]
    loader_seconds = time.perf_counter() - started
    tokens = sum(int((batch["segment_ids"] >= 0).sum()) for batch in batches)
    model, loss_fn = components.model, components.loss
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(batch) -> None:
        loss_fn(model, batch)["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step(batches[0])  # warm-up
    started = time.perf_counter()
    for batch in batches:
        step(batch)
    step_seconds = time.perf_counter() - started
    return {"loader_tokens_per_s": round(tokens / loader_seconds),
            "train_step_tokens_per_s": round(tokens / step_seconds),
            "loader_over_step": round(step_seconds / loader_seconds, 1), "tokens_per_step": round(tokens / steps),
            "train_step_seconds": round(step_seconds / steps, 4)}


def main() -> None:
    args = parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="xdllm-bench-data-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        large, small = work / "large.txt", work / "small.txt"
        started = time.perf_counter()
        write_corpus(large, int(args.size_mb * 1e6))
        write_head(large, small, int(args.size_mb * 1e6 / 10))
        generate_seconds = time.perf_counter() - started
        tokenizer = work / "tokenizer.json"
        train_tokenizer(large, tokenizer, args.vocab)
        tokenizer_alone_mb_per_s = tokenizer_alone(large, tokenizer)
        prepared = {}
        for name, source in (("small", small), ("large", large)):
            summary = prepare_corpus(source, work / f"prepared-{name}", tokenizer, args.workers, args.max_tokens)
            prepared[name] = summary
        preparation = {
            "corpus_mb": {name: round(summary["source_bytes"] / 1e6, 1) for name, summary in prepared.items()},
            "train_tokens": {name: summary["tokens"]["train"] for name, summary in prepared.items()},
            "prepare_workers": args.workers,
            "prepare_mb_per_s": {name: summary["mb_per_second"] for name, summary in prepared.items()},
            "prepare_seconds": {name: summary["seconds"] for name, summary in prepared.items()},
            "tokenizer_alone_one_process_mb_per_s": tokenizer_alone_mb_per_s,
            "load_average": round(os.getloadavg()[0], 2),
        }
        if args.prepare_only:
            print(json.dumps(preparation))
            return
        memory = {name: training_memory(work / f"prepared-{name}", tokenizer, work / f"run-{name}", args.steps,
                                        args.threads) for name in ("small", "large")}
        throughput = loader_and_step_throughput(work / "prepared-large", tokenizer, args.loader_steps, args.threads)
        peak_small, peak_large = memory["small"]["peak_rss_mb"], memory["large"]["peak_rss_mb"]
        print(json.dumps({
            **preparation,
            "training_peak_rss_mb": {"small": round(peak_small, 1), "large": round(peak_large, 1)},
            "larger_corpus_adds_rss_percent": round(100 * (peak_large - peak_small) / peak_small, 2),
            "training_end_rss_mb": {name: {"anon": round(m["rss_anon_mb"], 1), "file": round(m["rss_file_mb"], 1)}
                                    for name, m in memory.items()},
            "training_steps": args.steps,
            **throughput,
            "generate_corpus_seconds": round(generate_seconds, 1),
        }))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
