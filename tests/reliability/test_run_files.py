"""Run directories and checkpoints are what they say: last.ckpt is the newest state, a run
directory belongs to one run, generation folders never collide, corrupt checkpoints are refused
with one line, and nothing is written before the inputs are validated."""

import json
from pathlib import Path

import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.train.checkpoint_io import read_checkpoint_file

STEPS = ["trainer.max_steps=6", "trainer.val_check_interval=3"]


def _step(path: Path) -> int:
    return int(read_checkpoint_file(path)["global_step"])


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("xdllm: error:") and len(err.splitlines()) == 1, err
    return err


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("reliability") / "run"
    assert main(["train", *TINY, *STEPS, "checkpoint.save_every_n_steps=2", f"run_dir={run_dir}"]) == 0
    return run_dir


def test_last_checkpoint_is_the_final_state_whatever_the_metric_did(run):
    checkpoints = run / "checkpoints"
    assert _step(checkpoints / "last.ckpt") == 6
    assert _step(checkpoints / "best.ckpt") in (3, 6)
    assert sorted(p.name for p in checkpoints.glob("step*.ckpt")) == [
        "step0000002.ckpt", "step0000004.ckpt", "step0000006.ckpt"]
    assert _step(checkpoints / "step0000004.ckpt") == 4
    assert not list(checkpoints.glob(".*"))  # no temporary file left behind


def test_a_run_directory_belongs_to_one_run(run, tmp_path, capsys):
    config_before = (run / "config.yaml").read_text()
    assert main(["train", *TINY, *STEPS, f"run_dir={run}"]) == 2
    error = _error(capsys)
    assert "already holds a run" in error and f"resume={run}" in error
    assert (run / "config.yaml").read_text() == config_before
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "config.yaml").write_text("earlier run\n")
    assert main(["train", *TINY, "trainer.max_steps=1", "trainer.val_check_interval=1", f"run_dir={copy}",
                 "existing_run_dir=move_aside"]) == 0
    moved = list(tmp_path.glob("copy.moved-*"))
    assert len(moved) == 1 and (moved[0] / "config.yaml").read_text() == "earlier run\n"
    assert (copy / "checkpoints" / "last.ckpt").is_file()


def test_resume_continues_from_the_newest_state_in_place(run, tmp_path, capsys):
    assert main(["train", *TINY, "trainer.max_steps=8", "trainer.val_check_interval=3", f"run_dir={run}",
                 f"resume={run}"]) == 0
    assert _step(run / "checkpoints" / "last.ckpt") == 8


def test_a_corrupt_checkpoint_is_one_line_for_generate_and_resume(run, tmp_path, capsys):
    corrupt = tmp_path / "corrupt.ckpt"
    data = bytearray((run / "checkpoints" / "step0000002.ckpt").read_bytes())
    weights = read_checkpoint_file(run / "checkpoints" / "step0000002.ckpt")["state_dict"]
    tensor = next(v for v in weights.values() if v.numel() > 100)
    position = data.find(tensor.numpy().tobytes()[:64])
    data[position + 17] ^= 0x40
    corrupt.write_bytes(bytes(data))
    assert main(["generate", f"ckpt={corrupt}"]) == 2
    assert f"checkpoint {corrupt} is corrupt" in _error(capsys)
    fresh = tmp_path / "fresh"
    assert main(["train", *TINY, *STEPS, f"run_dir={fresh}", f"resume={corrupt}"]) == 2
    assert "is corrupt" in _error(capsys)
    assert not fresh.exists()  # nothing written before the inputs were validated


def test_generation_folders_never_collide_and_are_never_overwritten(run, tmp_path, capsys):
    for _ in range(2):  # the same second: the second one gets a numbered folder
        assert main(["generate", f"ckpt={run}", "num_samples=4"]) == 0
    reported = [json.loads(block + "}")["predictions"] for block in capsys.readouterr().out.split("}\n") if block]
    generated = sorted((run / "generate").iterdir())
    assert len(generated) == 2 and all((g / "predictions.jsonl").is_file() for g in generated)
    assert sorted(reported) == sorted(str(g / "predictions.jsonl") for g in generated)
    target = tmp_path / "out"
    assert main(["generate", f"ckpt={run}", "num_samples=4", f"output_dir={target}"]) == 0
    capsys.readouterr()
    assert main(["generate", f"ckpt={run}", "num_samples=4", f"output_dir={target}"]) == 2
    assert "already holds predictions.jsonl, summary.json, generate.yaml" in _error(capsys)
    assert main(["generate", f"ckpt={run}", "num_samples=4", "history=topk", f"output_dir={run}"]) == 2
    assert f"output_dir {run} already holds tensorboard;" in _error(capsys)  # the run's own curves
    assert not (run / "predictions.jsonl").exists()


def test_a_canvas_beyond_the_models_positions_is_refused_up_front(run, capsys):
    assert main(["generate", f"ckpt={run}", "predictor.max_new_tokens=100000"]) == 2
    error = _error(capsys)
    assert "max_positions=512" in error and "predictor.max_new_tokens=100000" in error


def test_stale_temporary_files_are_removed_at_the_next_start(run, tmp_path):
    stale = run / "checkpoints" / ".last.ckpt.tmp-999999999"
    stale.write_bytes(b"half a checkpoint")
    gen_stale = run / "generate" / "interrupted" / ".predictions.jsonl.tmp-999999998"
    gen_stale.parent.mkdir(parents=True, exist_ok=True)  # not left to another test's generation (xdist order)
    gen_stale.write_text("{")
    history_stale = run / "generate" / "old" / "history" / ".history-00000.pt.tmp-999999997"
    history_stale.parent.mkdir(parents=True)
    history_stale.write_bytes(b"half a history file")
    assert main(["generate", f"ckpt={run}", "num_samples=2"]) == 0
    assert not gen_stale.exists() and not history_stale.exists()
    assert main(["train", *TINY, "trainer.max_steps=9", "trainer.val_check_interval=3", f"run_dir={run}",
                 f"resume={run}"]) == 0
    assert not stale.exists()
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 9


def test_resuming_with_another_model_size_or_family_is_one_line(run, capsys):
    assert main(["train", *TINY, *STEPS, "model.d_model=64", f"run_dir={run}", f"resume={run}"]) == 2
    assert "does not fit the model this config builds" in _error(capsys)
    assert main(["train", *TINY, *STEPS, "model=mdlm", f"run_dir={run}", f"resume={run}"]) == 2
    assert "holds a mlm model, this run builds mdlm" in _error(capsys)
