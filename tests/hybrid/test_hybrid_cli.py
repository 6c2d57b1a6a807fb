"""The hybrid family from the command line: train, eval (objective, NLL, perplexity, bound), generate
with the threshold and the block size, bad predictor options as one-line errors."""

import json
import math
from pathlib import Path

import pytest
from tiny_run import TINY_RUN

from xdllm.cli.main import main

TINY_HYBRID = [*(o for o in TINY_RUN if not o.startswith("experiment=")), "model=hybrid", "task=sort",
               "task.params.length=4", "model.d_model=32", "model.n_layers=1", "model.n_heads=2"]


@pytest.fixture(scope="module")
def hybrid_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("hybrid") / "run"
    assert main(["train", *TINY_HYBRID, "trainer.max_steps=4", "trainer.val_check_interval=2",
                 f"run_dir={run_dir}"]) == 0
    return run_dir


def test_eval_reports_the_objective_and_the_causal_perplexity(hybrid_run, capsys):
    assert main(["eval", f"ckpt={hybrid_run}", "num_samples=8"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["nll"] > 0 and summary["ppl"] == pytest.approx(math.exp(summary["nll"]))
    assert summary["loss"] == pytest.approx(summary["diffusion_loss"] + summary["ar_loss"])
    assert summary["diffusion_ppl_bound"] == pytest.approx(math.exp(summary["diffusion_nll_bound"]))
    assert {"exact_match", "token_accuracy"} <= set(summary)


@pytest.mark.parametrize("options, most_steps", [
    (["predictor.threshold=null"], 8),                            # 4 digits + eos in 2 blocks of 4
    (["predictor.threshold=0.0"], 4),                             # seed + one fill pass per block
    (["predictor.block_size=1", "predictor.threshold=null"], 5)])  # autoregressive: one pass per token
def test_generate_with_blocks_and_thresholds(hybrid_run, tmp_path, capsys, options, most_steps):
    assert main(["generate", f"ckpt={hybrid_run}", "num_samples=8", f"output_dir={tmp_path}", *options]) == 0
    summary = json.loads(capsys.readouterr().out)
    records = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 8 and all(1 <= r["steps_taken"] <= most_steps for r in records)
    assert summary["mean_steps"] <= most_steps


@pytest.mark.parametrize("option, named", [
    ("predictor.threshold=1.5", "threshold"), ("predictor.block_size=0", "block_size"),
    ("predictor.steps_per_block=0", "steps_per_block"), ("predictor.max_steps=3", "max_steps")])
def test_bad_predictor_options_are_one_line_errors(hybrid_run, capsys, option, named):
    assert main(["generate", f"ckpt={hybrid_run}", "num_samples=2", option]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("xdllm: error:") and named in error[0]


def test_alpha_zero_trains_the_causal_branch_only(tmp_path, capsys):
    assert main(["train", *TINY_HYBRID, "hybrid.alpha=0.0", "trainer.max_steps=2", "trainer.val_check_interval=2",
                 f"run_dir={tmp_path / 'run'}"]) == 0
    capsys.readouterr()
    assert main(["eval", f"ckpt={tmp_path / 'run'}", "num_samples=8"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["diffusion_loss"] == 0.0 and summary["loss"] == pytest.approx(summary["ar_loss"])
