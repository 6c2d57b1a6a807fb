"""``eval`` runs one configuration, and ``train`` without ``-m``: ``KEY=A,B`` (and ``eval -m``) are
refused in one line that says how to run several (``-m``, a shell loop; ``generate -m`` where it
applies)."""

import pytest

from xdllm.cli.main import main


@pytest.mark.parametrize(("argv", "expected"), [
    (["train", "experiment=sort_mlm", "optim.lr=1e-3,3e-3"],
     "optim.lr=1e-3,3e-3 gives several values: add -m to train one run per value, one after another (quote a single "
     "value that contains a comma)"),
    (["eval", "ckpt=best.ckpt,last.ckpt"],
     "ckpt=best.ckpt,last.ckpt gives several values, but xdllm eval runs one configuration: run it once per value, "
     "e.g. for v in best.ckpt last.ckpt; do xdllm eval ... ckpt=$v; done (quote"),
    (["eval", "ckpt=runs/x", "predictor.threshold=0.5,0.9"],
     "do xdllm eval ... predictor.threshold=$v; done; xdllm generate -m sweeps it in one command"),
    (["eval", "ckpt=runs/x", "--multirun"], "-m (a sweep) is for xdllm generate and train: xdllm eval runs one"),
])
def test_several_values_without_a_sweep_are_refused_in_one_line(argv, expected, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("xdllm: error: ") and expected in line, line


def test_a_value_with_a_comma_can_be_quoted(capsys):
    assert main(["train", "--cfg", "experiment=sort_mlm", "name='a,b'"]) == 0
    assert "name: a,b" in capsys.readouterr().out
