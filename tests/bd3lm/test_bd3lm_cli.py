"""The BD3-LM family from the command line: train, eval reports the bound, generate with or
without the cache, packed training, the text experiment."""

import json
from pathlib import Path

import pytest
from tiny_run import TINY_RUN

from xdllm.cli.main import main

REPOSITORY = Path(__file__).parents[2]
TINY_NETWORK = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2"]
TINY_BD3LM = [*(o for o in TINY_RUN if not o.startswith("experiment=")), "experiment=sort_bd3lm",
              "task.params.length=4", *TINY_NETWORK]


@pytest.fixture(scope="module")
def bd3lm_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("bd3lm") / "run"
    assert main(["train", *TINY_BD3LM, "trainer.max_steps=4", "trainer.val_check_interval=2",
                 "bd3lm.noise_low=0.3", "bd3lm.noise_high=0.8", f"run_dir={run_dir}"]) == 0
    return run_dir


def test_eval_reports_the_bound(bd3lm_run, capsys):
    assert main(["eval", f"ckpt={bd3lm_run}", "num_samples=8"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["nll_bound"] > 0 and summary["ppl_bound"] == pytest.approx(2.718281828 ** summary["nll_bound"])
    assert {"loss", "exact_match", "token_accuracy"} <= set(summary)


def test_generate_gives_the_same_predictions_with_and_without_the_cache(bd3lm_run, tmp_path, capsys):
    records = []
    for use_cache in ("true", "false"):
        output = tmp_path / use_cache
        assert main(["generate", f"ckpt={bd3lm_run}", "num_samples=8", f"output_dir={output}",
                     f"predictor.use_cache={use_cache}", "predictor.threshold=0.5"]) == 0
        capsys.readouterr()
        lines = (output / "predictions.jsonl").read_text().splitlines()
        records.append([(r["text"], r["steps_taken"]) for r in map(json.loads, lines)])
    assert records[0] == records[1] and len(records[0]) == 8


def test_a_bad_predictor_option_is_a_one_line_error(bd3lm_run, capsys):
    assert main(["generate", f"ckpt={bd3lm_run}", "predictor.steps_per_block=0"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("xdllm: error:") and "steps_per_block" in error and len(error.splitlines()) == 1


@pytest.mark.parametrize(("command", "option"), [("generate", "predictor"), ("eval", "evaluator")])
def test_a_block_size_other_than_the_trained_one_is_said(bd3lm_run, tmp_path, capsys, command, option):
    out = [f"output_dir={tmp_path / 'out'}"] if command == "generate" else []
    assert main([command, f"ckpt={bd3lm_run}", "num_samples=4", f"{option}.block_size=2", *out]) == 0
    assert (f"{option}.block_size=2 differs from bd3lm.block_size=4, the value the run trained with: the model is "
            "used with a setting it never trained on") in capsys.readouterr().err
    out = [f"output_dir={tmp_path / 'same'}"] if command == "generate" else []
    assert main([command, f"ckpt={bd3lm_run}", "num_samples=4", f"{option}.block_size=4", *out]) == 0
    assert "differs from" not in capsys.readouterr().err


def test_packed_training_runs(tmp_path):
    assert main(["train", *TINY_BD3LM, "collator=packed_bd3lm", "collator.train.row_length=32",
                 "trainer.max_steps=2", "trainer.val_check_interval=2", f"run_dir={tmp_path / 'run'}"]) == 0
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()


def test_the_text_experiment_trains_on_the_local_corpus(tmp_path, monkeypatch):
    monkeypatch.chdir(REPOSITORY)
    run_dir = tmp_path / "run"
    assert main(["train", "experiment=text_bd3lm", *TINY_NETWORK, "trainer.max_steps=2",
                 "trainer.val_check_interval=2", "data.batch_size=4", "data.eval_batch_size=8",
                 "data.num_val_samples=8", "data.num_test_samples=4", "evaluator.num_levels=1",
                 "generate_after_train=false", "history.num_samples=0", "trainer.enable_progress_bar=false",
                 "torch_threads=1", f"run_dir={run_dir}"]) == 0
    assert "block_size: 16" in (run_dir / "config.yaml").read_text()
    assert (run_dir / "checkpoints" / "best.ckpt").is_file()


def test_block_aligned_generation_that_cannot_fit_the_positions_is_refused_before_training(tmp_path, capsys):
    # sort of 4: bos + 4 prompt tokens + 5 answer slots = 10 positions, but with blocks of 8 the
    # prompt ends on a block boundary (8) and the answer takes 5 more: 13 > 12
    run_dir = tmp_path / "run"
    assert main(["train", *TINY_BD3LM, "bd3lm.block_size=8", "model.max_positions=12", f"run_dir={run_dir}"]) == 2
    error = capsys.readouterr().err
    assert "model.max_positions=12" in error and "13 positions" in error and "whole blocks" in error
    assert not run_dir.exists()


def test_generate_refuses_max_new_tokens_beyond_the_block_aligned_positions(bd3lm_run, capsys):
    # bos + 4 prompt tokens + 506 = 511 positions fit the 512, but the answer starts at 8: 514 do not
    assert main(["generate", f"ckpt={bd3lm_run}", "num_samples=2", "predictor.max_new_tokens=506"]) == 2
    error = capsys.readouterr().err
    assert "predictor.max_new_tokens=506" in error and "whole blocks" in error
