"""Settings that ``trainer.max_steps`` cuts off are said before training: a validation interval
longer than the run (it never validates), a warmup as long as the run (the schedule never starts)."""

from tiny_run import TINY

from xdllm.cli.main import main


def test_a_run_that_never_validates_says_so_and_keeps_its_last_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=3", "trainer.val_check_interval=5", f"run_dir={run_dir}"]) == 0
    assert ("trainer.val_check_interval=5 is more than trainer.max_steps=3: the run never validates"
            in capsys.readouterr().err)
    assert sorted(path.name for path in (run_dir / "checkpoints").iterdir()) == ["last.ckpt"]
    validated = tmp_path / "validated"
    assert main(["train", *TINY, "trainer.max_steps=3", "trainer.val_check_interval=3", f"run_dir={validated}"]) == 0
    assert "never validates" not in capsys.readouterr().err


def test_a_warmup_as_long_as_the_run_says_the_learning_rate_only_warms_up(tmp_path, capsys):
    assert main(["train", *TINY, "trainer.max_steps=3", "trainer.val_check_interval=3", "optim.warmup_steps=30",
                 f"run_dir={tmp_path / 'warm'}"]) == 0
    assert ("optim.warmup_steps=30 is not less than trainer.max_steps=3: the learning rate only warms up, to 0.0001 "
            "at the last step (optim.lr=0.001), and optim.schedule=cosine never starts") in capsys.readouterr().err
    assert main(["train", *TINY, "trainer.max_steps=3", "trainer.val_check_interval=3", "optim.warmup_steps=2",
                 f"run_dir={tmp_path / 'decays'}"]) == 0
    assert "optim.warmup_steps" not in capsys.readouterr().err
