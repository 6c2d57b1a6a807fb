"""Every experiment the project ships (the root configs' and every family package's) composes,
builds, fits its model's positions, and runs its loss on collated training and validation rows
and its predictor on prompt rows: a config that rots fails here, not in a user's first run.

The experiments are discovered, so a new one is covered without editing this file."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from xdllm.config.compose import compose_config, group_options
from xdllm.errors import XdllmError
from xdllm.evaluate.evaluation_loss import takes_context
from xdllm.interfaces import LossContext
from xdllm.registry import discover_families
from xdllm.run.build import build_components, build_datamodule
from xdllm.run.free_text import apply_task_defaults
from xdllm.run.train import check_positions

EXPERIMENTS = group_options(discover_families())["experiment"]
NEEDS_TRAINED_TARGET = {"sort_dflash", "text_dflash"}  # drafters: their frozen target is a trained run


@pytest.fixture(autouse=True)
def _from_another_directory(monkeypatch, tmp_path):
    """The experiments' shipped data (experiments/data/) is found from any working directory."""
    monkeypatch.chdir(tmp_path)


def test_the_shipped_experiments_are_all_found():
    assert {"sort_mlm", "sudoku_mlm_gpu", "varlen_sort_packed", "sort_arlm", "text_bd3lm", "sort_dflash",
            "text_hybrid", "sort_mdlm", "text_udlm"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("experiment", sorted(set(EXPERIMENTS) - NEEDS_TRAINED_TARGET))
def test_experiment_builds_and_runs_its_loss_and_predictor(experiment):
    torch.manual_seed(0)
    config = compose_config("train", [f"experiment={experiment}", "data.num_val_samples=2",
                                      "data.num_test_samples=2"])
    components = build_components(config)
    check_positions(components.model, components.task, int(config.derived.max_new_tokens), components.predictor)
    OmegaConf.set_struct(config, False)
    apply_task_defaults(config, components.task)  # as xdllm train does
    examples = build_datamodule(components).held_out_examples("validation")[:2]
    model = components.model.eval()
    with torch.no_grad():
        for role in ("train", "val"):
            batch = components.collators[role](examples)
            if takes_context(components.loss):
                result = components.loss(model, batch, context=LossContext(counts=None, frozen={}))
            else:
                result = components.loss(model, batch)
            assert torch.isfinite(result["loss"]), (experiment, role)
        prediction = components.predictor.predict(components.collators["prediction"](examples), model=model)
    assert len(prediction["text"]) == 2 and len(prediction["steps_taken"]) == 2


@pytest.mark.parametrize("experiment", sorted(NEEDS_TRAINED_TARGET))
def test_a_drafter_experiment_without_its_target_names_the_missing_run(experiment, tmp_path):
    missing = tmp_path / "no_target"
    with pytest.raises(XdllmError, match=f"not found: {missing}; the drafter drafts for a trained arlm run: "
                                         "train one first"):
        build_components(compose_config("train", [f"experiment={experiment}", f"frozen.target={missing}"]))
