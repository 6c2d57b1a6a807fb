"""A validation interval longer than the run says, before training, that the run never validates."""

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
