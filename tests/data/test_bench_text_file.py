"""scripts/bench_text_file.py times the corpus it is given, with its tokenizer, and reports it."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_text_file.py"


def test_reports_the_lines_and_timings_of_the_corpus(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_text_file", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\n\nwrite <mask> where a word was hidden\n" * 20, encoding="utf-8")
    module.main(["--corpus", str(corpus), "--vocab", "300", "--repeat", "1"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["lines"] == 40 and report["vocab_size"] <= 300  # blank lines are not documents
    assert report["corpus_mb"] == round(corpus.stat().st_size / 1e6, 2)
    timings = ("task_seconds", "encode_lines_seconds", "encode_batch_seconds", "encode_batch_as_text_seconds",
               "task_speedup", "as_text_cost")  # milliseconds here: a busy machine may round one to 0.0
    assert all(isinstance(report[key], float) and report[key] >= 0 for key in timings)
