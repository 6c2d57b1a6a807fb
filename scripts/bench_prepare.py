"""Throughput of ``xdllm data prepare`` alone, on a corpus and tokenizer you already have.

Prepares ``CORPUS`` with ``TOKENIZER`` into a temporary folder ``--repeat`` times, with
``--workers`` processes, and prints one JSON line: source MB, each run's MB/s of wall time and
MB per CPU second (this process and its workers, user + system: what other jobs on shared cores
disturb least), the best of each, the largest peak resident memory of a worker process, the
SHA-256 of the prepared arrays (equal for equal output) and the load average before the runs.

    OMP_NUM_THREADS=1 python scripts/bench_prepare.py corpus.txt tokenizer.json --workers 1

Make a corpus with ``scripts/make_text_corpus.py`` (stories, word-level tokenizer) or with
``scripts/bench_data.py --keep`` (random words, byte-level BPE).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import tempfile
from pathlib import Path

from xdllm.data.prepare import PrepareOptions, prepare
from xdllm.data.prepared_store import SPLITS


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("tokenizer", help="a tokenizers .json file, or builtin")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=256, help="longer documents are cut")
    parser.add_argument("--repeat", type=int, default=2)
    return parser.parse_args()


def arrays_digest(folder: Path) -> str:
    """SHA-256 over every split's arrays, in a fixed order."""
    digest = hashlib.sha256()
    for split in SPLITS:
        for path in sorted(folder.glob(f"{split}.*.npy")):
            digest.update(path.read_bytes())
    return digest.hexdigest()


def cpu_seconds() -> float:
    """User + system seconds of this process and its finished children."""
    return sum(usage.ru_utime + usage.ru_stime
               for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


def main() -> None:
    args = parse_args()
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="xdllm-bench-prepare-", dir="/tmp"))
    runs, cpu_runs, digests, summary = [], [], set(), {}
    try:
        for repeat in range(args.repeat):
            output = work / f"prepared-{repeat}"
            cpu_before = cpu_seconds()
            summary = prepare(PrepareOptions(inputs=[args.corpus], output=output, tokenizer=args.tokenizer,
                                             workers=args.workers, val_fraction=0.01, test_fraction=0.0,
                                             max_tokens=args.max_tokens))
            runs.append(summary["mb_per_second"])
            cpu_runs.append(round(summary["source_bytes"] / 1e6 / (cpu_seconds() - cpu_before), 3))
            digests.add(arrays_digest(output))
            shutil.rmtree(output)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"source_mb": round(summary["source_bytes"] / 1e6, 1), "workers": args.workers,
                      "mb_per_s": runs, "best_mb_per_s": max(runs), "mb_per_cpu_s": cpu_runs,
                      "best_mb_per_cpu_s": max(cpu_runs), "tokens": sum(summary["tokens"].values()),
                      "worker_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
                      "digest": sorted(digests), "load_before": round(load, 2)}))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
