"""best.ckpt moves to the newer checkpoint when the monitored metric ties; the newest state
(last.ckpt) knows the best value of the validations up to its step."""

import lightning as L
import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.train.best_checkpoint import NewestOnTieCheckpoint
from xdllm.train.checkpoint_io import read_checkpoint_file


@pytest.mark.parametrize("mode, better, worse", [("max", 0.6, 0.4), ("min", 0.4, 0.6)])
def test_a_tie_replaces_the_best_checkpoint_and_a_worse_value_does_not(tmp_path, mode, better, worse):
    checkpoint = NewestOnTieCheckpoint(dirpath=tmp_path, filename="best", monitor="val/x", mode=mode, save_top_k=1)
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    checkpoint.best_k_models = {str(tmp_path / "best.ckpt"): torch.tensor(0.5)}
    checkpoint.kth_best_model_path = str(tmp_path / "best.ckpt")
    assert checkpoint.check_monitor_top_k(trainer, torch.tensor(0.5))  # a tie: the newer one is kept
    assert checkpoint.check_monitor_top_k(trainer, torch.tensor(better))
    assert not checkpoint.check_monitor_top_k(trainer, torch.tensor(worse))


def test_last_ckpt_holds_the_validation_of_its_own_step(tmp_path):
    """last.ckpt written at a step that then validates is written again after the validation: a
    resume from it (which does not validate that step again) knows that validation's value, so
    that a later, worse one cannot replace best.ckpt. It held the value before it."""
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.val_check_interval=2", "checkpoint.monitor=val/loss", "trainer.max_steps=4",
                 "checkpoint.last_every_n_steps=2", f"run_dir={run_dir}"]) == 0
    last = read_checkpoint_file(run_dir / "checkpoints" / "last.ckpt")
    best = read_checkpoint_file(run_dir / "checkpoints" / "best.ckpt")
    (state,) = [value for key, value in last["callbacks"].items() if key.startswith("NewestOnTieCheckpoint")]
    validated = {int(line.split("validation at step ")[1].split(" ")[0]): float(line.split("val/loss=")[1].split()[0])
                 for line in (run_dir / "train.log").read_text().splitlines() if "validation at step" in line}
    assert set(validated) == {2, 4} and last["global_step"] == 4
    assert float(state["best_model_score"]) == pytest.approx(min(validated.values()), abs=5e-4)
    (best_state,) = [value for key, value in best["callbacks"].items() if key.startswith("NewestOnTieCheckpoint")]
    assert float(state["best_model_score"]) == float(best_state["best_model_score"])
