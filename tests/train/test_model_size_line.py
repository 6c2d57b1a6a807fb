"""Training starts with one line about the model (its class, parameters, size), not Lightning's
summary table with its FLOPs column of zeros."""

import torch
from tiny_run import TINY

from xdllm.cli.main import main


def test_training_names_the_model_and_its_parameters_in_one_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=1", "trainer.val_check_interval=1",
                 "trainer.enable_model_summary=true", f"run_dir={run_dir}"]) == 0
    printed = capsys.readouterr()
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    count = sum(tensor.numel() for name, tensor in state.items() if name.startswith("model."))
    line = (f"model RotaryTransformerMLMModel: {count / 1000:.1f} K parameters ({count / 1000:.1f} K trainable), "
            f"{count * 4 / 1e6:.1f} MB\n")
    assert printed.err.count(line) == 1
    assert "FLOPs" not in printed.out + printed.err
