"""A run trained on EOS-filled responses (``<family>.target_length``) generates on the canvas it
trained on, and a longer canvas asked for is named in a warning."""

import json

import pytest
from tiny_run import TINY

from xdllm.cli.main import main


@pytest.mark.slow
@pytest.mark.parametrize("family", ["mlm", "mdlm"])
def test_generation_fills_the_canvas_the_run_trained_on(family, tmp_path, capsys):
    run_dir = tmp_path / "run"
    # sort 4 digits: answers are 5 tokens with EOS; the fill makes every training canvas 7 slots
    assert main(["train", *TINY, f"model={family}", f"{family}.target_length=7", "trainer.max_steps=2",
                 "trainer.val_check_interval=2", f"run_dir={run_dir}"]) == 0
    capsys.readouterr()
    assert main(["generate", f"ckpt={run_dir}", "num_samples=4", f"output_dir={tmp_path / 'gen'}"]) == 0
    printed = capsys.readouterr()
    summary = json.loads(printed.out[printed.out.index("{"):])
    records = [json.loads(line) for line in open(summary["predictions"])]
    assert [len(record["ids"]) for record in records] == [7] * 4  # not derived.max_new_tokens (5)
    assert summary["mean_steps"] == 7  # one token per step over the whole canvas
    assert "never trained on" not in printed.err
    assert main(["generate", f"ckpt={run_dir}", "num_samples=4", "predictor.max_new_tokens=9",
                 f"output_dir={tmp_path / 'longer'}"]) == 0
    assert (f"the run trained on responses EOS-filled to 7 slots ({family}.target_length=7), but the predictor "
            "generates 9 (predictor.max_new_tokens): the slots after the first 7 are positions it never trained "
            "on; predictor.max_new_tokens=7 generates on the canvas it learned") in capsys.readouterr().err
    assert main(["generate", "-m", f"ckpt={run_dir}", "num_samples=4", "predictor.max_new_tokens=8",
                 "predictor.threshold=0.5,0.9", f"output_dir={tmp_path / 'sweep'}"]) == 0
    assert capsys.readouterr().err.count("never trained on") == 1  # once for the sweep, not per generation
