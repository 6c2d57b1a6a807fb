"""best.ckpt moves to the newer checkpoint when the monitored metric ties."""

import lightning as L
import pytest
import torch

from xdllm.train.best_checkpoint import NewestOnTieCheckpoint


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
