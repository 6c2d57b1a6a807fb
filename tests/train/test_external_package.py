"""A model package outside the repo is discovered and trained without touching xdllm."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_run import TINY_RUN

from xdllm.cli.main import main


@pytest.mark.slow
def test_external_package_trains_from_the_search_path(external_models: Path, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["train", *TINY_RUN, "model=toyfam", f"model_search_path=[{external_models}]",
                 "trainer.max_steps=3", "trainer.val_check_interval=3", f"run_dir={run_dir}"])
    assert code == 0, capsys.readouterr().err
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert "model_family: toyfam" in (run_dir / "config.yaml").read_text()
    assert "ToyBagModel" in (run_dir / "config.yaml").read_text()
    # A fresh process finds the uninstalled family again through the checkpoint's search path.
    env = {k: v for k, v in os.environ.items() if k != "XDLLM_MODEL_PATH"}
    result = subprocess.run(
        [sys.executable, "-m", "xdllm.cli.main", "generate", f"ckpt={run_dir}", "num_samples=4",
         f"output_dir={tmp_path / 'gen'}"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "gen" / "predictions.jsonl").read_text().splitlines()) == 4


def test_external_package_listed_by_models_command(external_models: Path, monkeypatch, capsys):
    monkeypatch.setenv("XDLLM_MODEL_PATH", str(external_models))
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "toyfam" in out and "throwaway test family" in out and str(external_models) in out
