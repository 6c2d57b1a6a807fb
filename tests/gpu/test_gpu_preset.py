"""``trainer=gpu`` (bf16 mixed precision on one GPU) and fused AdamW on CUDA parameters."""

import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.config.compose import compose_config
from xdllm.errors import XdllmError
from xdllm.train.optim import build_optimizer, uses_fused_adamw
from xdllm.train.optim_config import OptimConfig


def test_the_gpu_preset_is_the_default_trainer_in_bf16_on_one_gpu():
    default, gpu = compose_config("train", []).trainer, compose_config("train", ["trainer=gpu"]).trainer
    assert (gpu.accelerator, gpu.devices, gpu.precision) == ("gpu", 1, "bf16-mixed")
    assert {key: gpu[key] for key in default if key not in ("accelerator", "precision")} == \
        {key: default[key] for key in default if key not in ("accelerator", "precision")}
    several = compose_config("train", ["trainer=gpu", "trainer_strategy=ddp", "trainer.devices=4"]).trainer
    assert (several.strategy, several.devices, several.precision) == ("ddp", 4, "bf16-mixed")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_the_gpu_preset_without_a_gpu_is_refused_in_one_line(tmp_path, capsys):
    assert main(["train", *TINY, "trainer=gpu", f"run_dir={tmp_path / 'run'}"]) == 2
    assert "trainer.accelerator=gpu but this machine has no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_fused_adamw_by_default_only_on_cuda_parameters():
    cpu_model = torch.nn.Linear(3, 3)
    assert uses_fused_adamw(cpu_model, None) is False
    assert uses_fused_adamw(cpu_model, True) is True and uses_fused_adamw(cpu_model, False) is False
    optimizer, _ = build_optimizer(cpu_model, OptimConfig(), total_steps=10)
    assert not optimizer.defaults["fused"]


def test_a_bad_fused_value_is_named():
    with pytest.raises(XdllmError, match="optim.fused"):
        compose_config("train", ["optim.fused=maybe"])


def test_fused_adamw_under_mixed_precision_trains_with_clipping(tmp_path):
    """Lightning's precision plugin refuses to clip for a fused optimizer under bf16-mixed (what
    trainer=gpu runs); the harness clips itself. Here on the CPU, where both exist too."""
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=3", "trainer.val_check_interval=3",
                 "trainer.precision=bf16-mixed", "optim.fused=true", "optim.gradient_clip_val=0.01",
                 f"run_dir={run_dir}"]) == 0
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_adamw_is_fused_on_cuda_and_steps():
    model = torch.nn.Linear(8, 8).cuda()
    optimizer, _ = build_optimizer(model, OptimConfig(), total_steps=10)
    assert optimizer.defaults["fused"] is True
    before = model.weight.detach().clone()
    model(torch.ones(2, 8, device="cuda")).square().sum().backward()
    optimizer.step()
    assert not torch.equal(before, model.weight)
