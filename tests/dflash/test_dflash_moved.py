"""A drafter and its target copied to another machine still generate: ``+frozen.target=`` says
where the target is now (generate, eval, and a resumed generation, which keeps it)."""

import json
import logging
import shutil
from pathlib import Path

import pytest
from dflash_helpers import DRAFTER
from omegaconf import OmegaConf
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.errors import XdllmError
from xdllm.run.checkpoint import load_trained


def _ids(output_dir: Path) -> list[list[int]]:
    return [json.loads(line)["ids"] for line in (output_dir / "predictions.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def moved_runs(target_run, tmp_path_factory) -> tuple[Path, Path, list[list[int]]]:
    """A drafter trained in ``machine_a`` on a target there, both copied to ``machine_b``;
    ``machine_a`` is gone. Returns the copied drafter and target, and the ids the drafter
    generated before the move."""
    root = tmp_path_factory.mktemp("moved")
    machine_a, machine_b = root / "machine_a", root / "machine_b"
    shutil.copytree(target_run, machine_a / "target")
    assert main(["train", *DRAFTER, f"+frozen.target={machine_a / 'target'}", f"run_dir={machine_a / 'drafter'}"]) == 0
    assert main(["generate", f"ckpt={machine_a / 'drafter'}", "num_samples=8", f"output_dir={root / 'before'}"]) == 0
    shutil.copytree(machine_a, machine_b)
    shutil.rmtree(machine_a)
    return machine_b / "drafter", machine_b / "target", _ids(root / "before")


def test_a_copied_drafter_generates_the_same_tokens_with_its_target_s_place_given(moved_runs, tmp_path, capsys):
    drafter, target, before = moved_runs
    capsys.readouterr()
    assert main(["generate", f"ckpt={drafter}", "num_samples=8", f"output_dir={tmp_path / 'lost'}"]) == 2
    error = capsys.readouterr().err.strip()
    assert "machine_a" in error and error.endswith(
        "; if the run's frozen models moved since training, or the runs were copied from another machine, give their "
        "place now: +frozen.target=<run directory or checkpoint>")
    assert main(["generate", f"ckpt={drafter}", "num_samples=8", f"+frozen.target={target}",
                 f"output_dir={tmp_path / 'after'}"]) == 0
    assert _ids(tmp_path / "after") == before
    assert OmegaConf.load(tmp_path / "after" / "generate.yaml").frozen.target == str(target)
    assert main(["eval", f"ckpt={drafter}", "num_samples=8", f"+frozen.target={target}"]) == 0


def test_the_drafter_reads_the_target_it_is_pointed_at(moved_runs):
    drafter, target, _ = moved_runs
    run = load_trained(drafter, frozen={"target": target})
    assert run.config.frozen.target == run.config.model.target == str(target)  # model.target gave it straight
    assert repr(run).startswith("TrainedRun(family='dflash', ") and repr(run).endswith(
        f", frozen=['target'], checkpoint='{run.checkpoint}')")


def test_a_frozen_model_the_run_lacks_is_refused_naming_what_it_has(moved_runs, tmp_path, capsys):
    drafter, target, _ = moved_runs
    with pytest.raises(XdllmError, match=r"^frozen.targt=\S+: the run has no frozen model 'targt' \(it has: target\)$"):
        load_trained(drafter, frozen={"targt": target})
    with pytest.raises(XdllmError, match="^frozen.target= is empty"):
        load_trained(drafter, frozen={"target": " "})
    mlm_run = tmp_path / "mlm"
    assert main(["train", *TINY, "trainer.max_steps=1", "trainer.val_check_interval=1", f"run_dir={mlm_run}"]) == 0
    capsys.readouterr()
    assert main(["generate", f"ckpt={mlm_run}", "+frozen.target=elsewhere"]) == 2
    assert capsys.readouterr().err.strip().endswith("the run has no frozen model 'target' (it has: none)")


def test_a_target_at_another_training_step_is_said_once(moved_runs, tmp_path, caplog):
    drafter, target, _ = moved_runs
    further = tmp_path / "target"
    shutil.copytree(target, further)
    assert main(["train", f"resume={further}", "trainer.max_steps=4"]) == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="xdllm.run.frozen_models"):
        load_trained(drafter, frozen={"target": further / "checkpoints" / "last.ckpt"})
    (line,) = [record.getMessage() for record in caplog.records if record.name == "xdllm.run.frozen_models"]
    assert line.startswith(f"frozen.target: {further / 'checkpoints' / 'last.ckpt'} holds training step 4, but ")
    assert "was trained with step 2 of " in line


def test_a_stopped_generation_resumes_with_the_target_s_place_it_was_given(moved_runs, tmp_path, monkeypatch):
    from xdllm.run import generate as generate_module

    drafter, target, before = moved_runs
    predict_batch, calls = generate_module.predict_batch, []

    def stopped_at_the_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return predict_batch(*args, **kwargs)

    out = tmp_path / "stopped"
    with monkeypatch.context() as patch:
        patch.setattr(generate_module, "predict_batch", stopped_at_the_second_batch)
        assert main(["generate", f"ckpt={drafter}", "num_samples=8", "batch_size=4", f"+frozen.target={target}",
                     f"output_dir={out}"]) == 130
    assert main(["generate", f"resume={out}"]) == 0  # where the target is, kept from its start
    assert _ids(out) == before
