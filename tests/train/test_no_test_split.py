"""data.num_test_samples=0 (prepared data without a test split, say): training ends without the
generation on the test split, saying so, and generate / eval ask for another split; the
generation after training raised ZeroDivisionError from the sampler of an empty split."""

import json

from tiny_run import TINY

from xdllm.cli.main import main


def test_a_run_without_test_samples_skips_the_generation_after_training(tmp_path, capsys):
    run = tmp_path / "run"
    overrides = [item for item in TINY if not item.startswith(("generate_after_train=", "data.num_test_samples="))]
    assert main(["train", *overrides, "data.num_test_samples=0", "trainer.max_steps=2", "trainer.val_check_interval=2",
                 f"run_dir={run}"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == f"run directory: {run}"  # no summary: nothing was generated
    assert (f"no generation after training: data.num_test_samples=0 keeps no test samples (generate on the "
            f"validation split with: xdllm generate ckpt={run} split=validation)") in captured.err
    assert (run / "checkpoints" / "best.ckpt").is_file() and not (run / "generate").exists()
    for command in ("generate", "eval"):
        assert main([command, f"ckpt={run}"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            "xdllm: error: the run kept no test samples (data.num_test_samples=0): give split=validation, or "
            "prompts with prompts_file=..."]
    assert main(["generate", f"ckpt={run}", "split=validation", "num_samples=4"]) == 0
    assert json.loads(capsys.readouterr().out)["num_samples"] == 4
