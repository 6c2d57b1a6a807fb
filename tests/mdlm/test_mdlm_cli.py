"""The MDLM family from the command line: eval reports the bound, generate samples ancestrally
and with ReMDM."""

import json
from pathlib import Path

import pytest
from tiny_run import TINY_RUN

from xdllm.cli.main import main

TINY_MDLM = [*(o for o in TINY_RUN if not o.startswith("experiment=")), "model=mdlm", "task=sort",
             "task.params.length=4", "model.d_model=32", "model.n_layers=1", "model.n_heads=2"]


@pytest.fixture(scope="module")
def mdlm_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("mdlm") / "run"
    assert main(["train", *TINY_MDLM, "trainer.max_steps=4", "trainer.val_check_interval=2",
                 f"run_dir={run_dir}"]) == 0
    return run_dir


def test_eval_reports_the_elbo_bound(mdlm_run, capsys):
    assert main(["eval", f"ckpt={mdlm_run}", "num_samples=8"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["nll_bound"] > 0 and summary["ppl_bound"] == pytest.approx(2.718281828 ** summary["nll_bound"])
    assert {"loss", "exact_match", "token_accuracy"} <= set(summary)


def test_generate_with_the_ancestral_sampler_skips_empty_steps(mdlm_run, tmp_path, capsys):
    assert main(["generate", f"ckpt={mdlm_run}", "num_samples=8", f"output_dir={tmp_path}",
                 "predictor.sampler=ancestral", "predictor.confidence=null", "predictor.max_steps=200"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert 1 <= summary["mean_steps"] <= 5  # at most one pass per position (4 digits + eos), not 200
    records = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 8


def test_ancestral_with_a_confidence_is_a_one_line_error(mdlm_run, capsys):
    assert main(["generate", f"ckpt={mdlm_run}", "predictor.sampler=ancestral"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("xdllm: error:") and "confidence='top_prob' does not apply" in error
    assert len(error.splitlines()) == 1


def test_generate_with_remdm_runs_the_steps_that_reveal_and_its_history_counts_what_it_masked_again(mdlm_run, tmp_path,
                                                                                         capsys):
    out = tmp_path / "remdm"
    assert main(["generate", f"ckpt={mdlm_run}", "num_samples=8", f"output_dir={out}", "history=topk",
                 "predictor.sampler=remdm", "predictor.confidence=null", "predictor.max_steps=30",
                 "predictor.remdm_eta=0.5"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert 5 <= summary["mean_steps"] < 30  # a forward pass for each step that reveals a mask
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 8 and all("<mask>" not in r["text"] for r in records)
    assert main(["history", "revisions", str(out / "history")]) == 0
    assert json.loads(capsys.readouterr().out)["taken_back"] > 0


@pytest.mark.parametrize(("option", "message"), [
    ("predictor.remdm_schedule=tempered", "remdm_schedule must be one of cap, rescale, conf, loop, got 'tempered'"),
    ("predictor.remdm_eta=2", "remdm_eta is a probability, in [0, 1]; got 2"),
])
def test_a_bad_remdm_option_is_a_one_line_error(mdlm_run, option, message, capsys):
    assert main(["generate", f"ckpt={mdlm_run}", "predictor.sampler=remdm", "predictor.confidence=null",
                 option]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("xdllm: error:") and message in error and len(error.splitlines()) == 1


def test_text_free_runs_can_validate_without_generation(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["train", *TINY_MDLM, "trainer.max_steps=2", "trainer.val_check_interval=2",
                 "data.validation_roles=[loss]", "checkpoint.monitor=val/nll_bound", "checkpoint.mode=min",
                 f"run_dir={run_dir}"]) == 0
    assert (run_dir / "checkpoints" / "best.ckpt").is_file()
