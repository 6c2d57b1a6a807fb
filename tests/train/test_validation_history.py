"""Training records denoising history for a few validation samples and renders it."""

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.history import load_history


@pytest.mark.slow
def test_each_validation_writes_history_and_tensorboard_views(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "history.num_samples=3", "history.k=2",
                 "trainer.max_steps=4", "trainer.val_check_interval=2", f"run_dir={run_dir}"]) == 0
    folders = sorted(p.name for p in (run_dir / "history").iterdir())
    assert folders == ["val-step0000002", "val-step0000004"]
    history = load_history(run_dir / "history" / "val-step0000004" / "history-00000.pt")
    assert len(history) == 3 and history.k == 2 and history.split == "validation"
    assert history.sample(0).num_steps == 5  # 4 digits + eos, one token per step
    views = EventAccumulator(str(run_dir / "tensorboard" / "history-step0000004"))
    views.Reload()
    assert "validation/sample_00000/denoising" in views.Tags()["images"]
