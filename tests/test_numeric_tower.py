"""Under the tests' type checker an ``int`` passes where ``float`` is annotated, as it does when
xdllm runs: a config value typed ``0`` or ``1`` (Hydra reads it as an int) works in tests too."""

from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.train.optim_config import OptimConfig


def test_whole_numbers_pass_for_float_options(tmp_path):
    assert OptimConfig(weight_decay=0, lr=1).weight_decay == 0
    assert main(["train", *TINY, "optim.weight_decay=0", "optim.min_lr_ratio=1", "trainer.max_steps=1",
                 "trainer.val_check_interval=1", "generate_after_train=true", "+predictor.temperature=0",
                 f"run_dir={tmp_path / 'run'}"]) == 0
