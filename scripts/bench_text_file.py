"""Loading a text corpus as ``task=text_file`` does, and what its encoding costs.

The corpus (default: this project's ``docs/*.md`` and ``README.md``, written ``--copies`` times
into a temporary file: real prose that mentions ``<mask>`` and ``<eos>`` as text) is encoded with
a byte-level BPE tokenizer trained on it (``xdllm tokenizer train``'s code, ``--vocab`` tokens;
or ``--tokenizer FILE``). Timed, best of ``--repeat``:

- ``task_seconds``: ``TextFileTask(corpus, tokenizer)``: reading, encoding (one batched call,
  special-token text read as text) and cutting the documents;
- ``encode_lines_seconds``: ``encode`` called once per line (how the task encoded before it
  encoded in one batch): the encoding alone, so ``task_speedup`` (its ratio to ``task_seconds``)
  understates what the batched task gained;
- ``encode_batch_seconds`` and ``encode_batch_as_text_seconds``: one batched call each, the
  second as corpora are read (``as_text_cost`` is their ratio).

Prints one JSON line. Nothing is downloaded.

    OMP_NUM_THREADS=1 python scripts/bench_text_file.py --copies 8
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from xdllm.data.text_corpus import TextFileTask
from xdllm.data.tokenizer import HFTokenizerFile
from xdllm.data.tokenizer_training import train_tokenizer_file

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=None, help="a text file (default: the docs, --copies times)")
    parser.add_argument("--copies", type=int, default=8, help="copies of the docs in the default corpus")
    parser.add_argument("--tokenizer", type=Path, default=None, help="a tokenizers .json (default: trained here)")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--repeat", type=int, default=3)
    return parser.parse_args(argv)


def best_seconds(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def docs_corpus(folder: Path, copies: int) -> Path:
    text = "".join(path.read_text(encoding="utf-8") for path in [*sorted((ROOT / "docs").glob("*.md")),
                                                                 ROOT / "README.md"])
    corpus = folder / "docs.txt"
    corpus.write_text(text * copies, encoding="utf-8")
    return corpus


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        corpus = args.corpus or docs_corpus(Path(work), args.copies)
        tokenizer_path = args.tokenizer
        if tokenizer_path is None:
            tokenizer_path = Path(work) / "tokenizer.json"
            train_tokenizer_file([corpus], tokenizer_path, vocab_size=args.vocab)
        tokenizer = HFTokenizerFile(tokenizer_path)
        lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
        task = best_seconds(lambda: TextFileTask(corpus, tokenizer), args.repeat)
        one_by_one = best_seconds(lambda: [tokenizer.encode(line) for line in lines], args.repeat)
        batch = best_seconds(lambda: tokenizer.encode_batch(lines), args.repeat)
        as_text = best_seconds(lambda: tokenizer.encode_batch_as_text(lines), args.repeat)
        megabytes = corpus.stat().st_size / 1e6
    print(json.dumps({
        "corpus_mb": round(megabytes, 2), "lines": len(lines), "vocab_size": tokenizer.vocab_size,
        "task_seconds": round(task, 3), "task_mb_per_second": round(megabytes / task, 2),
        "encode_lines_seconds": round(one_by_one, 3), "task_speedup": round(one_by_one / task, 2),
        "encode_batch_seconds": round(batch, 3), "encode_batch_as_text_seconds": round(as_text, 3),
        "as_text_cost": round(as_text / batch, 3), "repeat": args.repeat,
    }))


if __name__ == "__main__":
    main()
