"""The ARLM family from the command line: eval reports the NLL and perplexity, generate samples,
bad predictor options are one-line errors, packed rows train."""

import json
import math
from pathlib import Path

import pytest
from tiny_run import TINY_RUN

from xdllm.cli.main import main

TINY_ARLM = [*(o for o in TINY_RUN if not o.startswith("experiment=")), "model=arlm", "task=sort",
             "task.params.length=4", "model.d_model=32", "model.n_layers=1", "model.n_heads=2"]


@pytest.fixture(scope="module")
def arlm_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("arlm") / "run"
    assert main(["train", *TINY_ARLM, "trainer.max_steps=4", "trainer.val_check_interval=2",
                 f"run_dir={run_dir}"]) == 0
    return run_dir


def test_eval_reports_the_nll_and_perplexity(arlm_run, capsys):
    assert main(["eval", f"ckpt={arlm_run}", "num_samples=8"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["nll"] > 0 and summary["ppl"] == pytest.approx(math.exp(summary["nll"]))
    assert {"loss", "exact_match", "token_accuracy"} <= set(summary)


def test_generate_samples_with_top_k_and_top_p(arlm_run, tmp_path, capsys):
    assert main(["generate", f"ckpt={arlm_run}", "num_samples=8", f"output_dir={tmp_path}",
                 "predictor.temperature=0.7", "predictor.top_k=4", "predictor.top_p=0.9"]) == 0
    summary = json.loads(capsys.readouterr().out)
    records = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 8 and 1 <= summary["mean_steps"] <= 5  # at most 4 digits + eos
    assert all(1 <= r["steps_taken"] <= 5 for r in records)


@pytest.mark.parametrize("option, named", [
    ("predictor.top_p=1.5", "top_p"), ("predictor.temperature=-1", "temperature"), ("predictor.top_k=0", "top_k"),
    ("predictor.max_steps=3", "max_steps"), ("predictor.stop_at_eos=maybe", "stop_at_eos")])
def test_bad_predictor_options_are_one_line_errors(arlm_run, capsys, option, named):
    assert main(["generate", f"ckpt={arlm_run}", "num_samples=2", option]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("xdllm: error:") and named in error[0]


def test_packed_rows_train(tmp_path):
    assert main(["train", *TINY_ARLM, "collator=packed_arlm", "collator.train.row_length=32",
                 "collator.val.row_length=32", "trainer.max_steps=2", "trainer.val_check_interval=2",
                 f"run_dir={tmp_path / 'run'}"]) == 0
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
