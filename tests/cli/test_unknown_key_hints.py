"""An override of a key the config lacks suggests ``+KEY=VALUE`` only where the node takes new keys;
elsewhere it names the keys there, and for generate's ``data.*`` generate's own options."""

import pytest

from xdllm.cli.main import main


@pytest.mark.parametrize(("argv", "expected"), [
    (["generate", "ckpt=runs/x", "data.num_test_samples=8"],
     "unknown key 'data.num_test_samples': data has no such key and takes no new ones; generate sets what it "
     "generates with its own options: num_samples= (how many samples)"),
    (["train", "--cfg", "optim.foo=1"],
     "unknown key 'optim.foo': optim has no such key and takes no new ones; known keys there: accumulate_grad_batches"),
    (["train", "--cfg", "trainer.detect_anomaly=true"],
     "unknown key 'trainer.detect_anomaly': trainer does not list it; known keys there: accelerator, devices, "
     "enable_model_summary, enable_progress_bar, log_every_n_steps, max_steps, precision, val_check_interval; "
     "trainer takes new keys: add one with +trainer.detect_anomaly=VALUE"),
])
def test_unknown_key_hint_names_a_fix_that_is_accepted(argv, expected, capsys):
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"xdllm: error: {expected}"), line
    assert "+KEY=VALUE" not in line


def test_the_suggested_new_key_is_accepted(capsys):
    assert main(["train", "--cfg", "+trainer.detect_anomaly=true"]) == 0
    assert "detect_anomaly: true" in capsys.readouterr().out
