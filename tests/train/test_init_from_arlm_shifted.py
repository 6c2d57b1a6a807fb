"""A denoiser started from an ``arlm`` run with ``model.shift_outputs=true`` keeps the AR network's
layout (position j's logits from the state at j - 1) through training, checkpoints and generation;
without it the start is said to differ in layout."""

import json
from pathlib import Path

import pytest
import torch
from tiny_run import TINY_MLM, TINY_RUN

from xdllm.cli.main import main
from xdllm.run.checkpoint import load_trained
from xdllm.run.run_checkpoint import read_run_checkpoint

STILL = ["optim.lr=1e-30", "optim.warmup_steps=0", "optim.weight_decay=0.0"]
ONE_STEP = ["trainer.max_steps=1", "trainer.val_check_interval=1"]


@pytest.fixture(scope="module")
def arlm_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("shift") / "arlm"
    assert main(["train", "experiment=sort_arlm", *TINY_RUN[1:], *TINY_MLM, "trainer.max_steps=3",
                 "trainer.val_check_interval=3", f"run_dir={run_dir}"]) == 0
    return run_dir


@pytest.mark.parametrize("family", ["mdlm", "mlm"])
def test_a_shifted_denoiser_from_an_arlm_run_keeps_its_weights_and_layout(family, arlm_run, tmp_path, caplog):
    run_dir = tmp_path / family
    assert main(["train", *TINY_RUN, f"model={family}", *TINY_MLM, *STILL, *ONE_STEP, f"init_from={arlm_run}",
                 "model.shift_outputs=true", f"run_dir={run_dir}"]) == 0
    assert "init_from: starting from the weights of" in caplog.text and "note:" not in caplog.text
    trained = load_trained(run_dir)
    network = trained.model.transformer if family == "mlm" else trained.model
    assert network.shifts_outputs
    source = read_run_checkpoint(arlm_run).model_weights()
    assert all(torch.equal(network.state_dict()[name], value) for name, value in source.items())


def test_an_unshifted_start_from_an_arlm_run_names_the_option(arlm_run, tmp_path, caplog):
    assert main(["train", *TINY_RUN, "model=mdlm", *TINY_MLM, *STILL, *ONE_STEP, f"init_from={arlm_run}",
                 f"run_dir={tmp_path / 'plain'}"]) == 0
    assert ("note: its outputs at a position predict the next token, this model's the token there: "
            "model.shift_outputs=true keeps its layout") in caplog.text


def test_a_shifted_run_generates_the_same_at_any_batch_size_and_with_the_prefix_cache(tmp_path):
    """One layer: the prefix cache's kept keys cannot be stale, so it decodes what recomputing
    the whole canvas decodes, the shift included."""
    run_dir = tmp_path / "shifted"
    varlen = ["task=varlen_sort", "task.params.median_length=4", "task.params.min_length=2",
              "task.params.max_length=6"]  # prompts of several lengths: rows padded differently per batch
    assert main(["train", *(o for o in TINY_RUN if not o.startswith(("experiment=", "task."))), *varlen,
                 "model=mdlm", *TINY_MLM, "trainer.max_steps=4", "trainer.val_check_interval=4",
                 "model.shift_outputs=true", f"run_dir={run_dir}"]) == 0
    texts = []
    for name, options in (("batch16", ["batch_size=16"]), ("batch5", ["batch_size=5"]),
                          ("cached", ["batch_size=16", "predictor.prefix_cache=true"])):
        output = tmp_path / name
        assert main(["generate", f"ckpt={run_dir}", "num_samples=16", *options, f"output_dir={output}"]) == 0
        records = map(json.loads, (output / "predictions.jsonl").read_text().splitlines())
        texts.append([(r["sample_index"], r["text"], r["steps_taken"]) for r in records])
    assert texts[0] == texts[1] == texts[2]


def test_a_shifted_start_from_an_unshifted_run_names_the_option(tmp_path, caplog):
    source = tmp_path / "mdlm"
    assert main(["train", *TINY_RUN, "model=mdlm", *TINY_MLM, *ONE_STEP, f"run_dir={source}"]) == 0
    assert main(["train", *TINY_RUN, "model=mdlm", *TINY_MLM, *ONE_STEP, f"init_from={source}",
                 "model.shift_outputs=true", f"run_dir={tmp_path / 'shifted'}"]) == 0
    assert ("note: its outputs at a position predict the token there, this model's (model.shift_outputs=true) "
            "the next one: model.shift_outputs=false keeps its layout") in caplog.text
