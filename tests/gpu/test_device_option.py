"""The ``device`` option of `xdllm generate` / `xdllm eval`, and autocast of bf16-trained runs."""

import json
from pathlib import Path

import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.errors import XdllmError
from xdllm.run.device import autocast, autocast_dtype, batch_to, resolve_device

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("device") / "run"
    assert main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2",
                 f"run_dir={run_dir}"]) == 0
    return run_dir


def _summary(capsys) -> dict:
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def test_auto_picks_cuda_exactly_when_torch_has_it(monkeypatch):
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("bad", ["gpu", "cuda:0", None, 1])
def test_an_unknown_device_is_refused_naming_the_choices(bad):
    with pytest.raises(XdllmError, match="device must be one of auto, cpu, cuda"):
        resolve_device(bad)


def test_cuda_without_cuda_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(XdllmError, match="device=cuda but torch sees no CUDA device"):
        resolve_device("cuda")


def test_autocast_dtype_follows_the_training_precision_on_cuda_only():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert autocast_dtype("bf16-mixed", cuda) is torch.bfloat16
    assert autocast_dtype("bf16-true", cuda) is torch.bfloat16
    assert autocast_dtype("16-mixed", cuda) is torch.float16
    assert autocast_dtype(16, cuda) is torch.float16
    assert autocast_dtype("32-true", cuda) is None
    assert autocast_dtype("bf16-mixed", cpu) is None


def test_autocast_none_changes_nothing_and_batch_to_moves_only_tensors():
    layer = torch.nn.Linear(4, 4)
    with autocast(torch.device("cpu"), None):
        assert layer(torch.ones(1, 4)).dtype is torch.float32
    moved = batch_to({"ids": torch.ones(2), "infill": False}, torch.device("cpu"))
    assert moved["infill"] is False and moved["ids"].device.type == "cpu"


def test_generate_and_eval_on_the_cpu_say_so(trained_run, tmp_path, capsys):
    assert main(["generate", f"ckpt={trained_run}", "device=cpu", "num_samples=4",
                 f"output_dir={tmp_path / 'gen'}"]) == 0
    assert _summary(capsys)["device"] == "cpu"
    assert main(["eval", f"ckpt={trained_run}", "device=auto", "num_samples=4"]) == 0
    assert _summary(capsys)["device"] == ("cuda" if torch.cuda.is_available() else "cpu")


def test_generate_with_an_unavailable_device_fails_before_loading(trained_run, tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out_dir = tmp_path / "never"
    assert main(["generate", f"ckpt={trained_run}", "device=cuda", f"output_dir={out_dir}"]) == 2
    assert "device=cuda but torch sees no CUDA device" in capsys.readouterr().err
    assert main(["eval", f"ckpt={trained_run}", "device=tpu"]) == 2
    assert "device must be one of auto, cpu, cuda, got 'tpu'" in capsys.readouterr().err
    assert not out_dir.exists()


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_generation_on_cuda_does_not_depend_on_the_batch(tmp_path, capsys, precision):
    """Through the CLI path: trained on the GPU, generated there (in bf16 autocast when it
    trained in bf16) in batches of 16 and of 3: every sample's text and steps are the same."""
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=30", "trainer.val_check_interval=30",
                 "trainer.accelerator=gpu", f"trainer.precision={precision}", f"run_dir={run_dir}"]) == 0
    capsys.readouterr()
    texts = {}
    for batch_size in (16, 3):
        out_dir = tmp_path / f"gen{batch_size}"
        assert main(["generate", f"ckpt={run_dir}", "device=cuda", f"batch_size={batch_size}",
                     f"output_dir={out_dir}"]) == 0
        assert _summary(capsys)["device"] == "cuda"
        records = [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]
        texts[batch_size] = {r["sample_index"]: (r["text"], r["steps_taken"]) for r in records}
    assert texts[16] == texts[3] and len(texts[16]) == 16
