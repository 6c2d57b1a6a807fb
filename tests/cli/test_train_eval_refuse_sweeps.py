"""``train`` and ``eval`` run one configuration: ``KEY=A,B`` and ``-m`` are refused in one line that
says how to run several (a shell loop; ``generate -m`` where it applies)."""

import pytest

from xdllm.cli.main import main


@pytest.mark.parametrize(("argv", "expected"), [
    (["train", "experiment=sort_mlm", "optim.lr=1e-3,3e-3"],
     "optim.lr=1e-3,3e-3 gives several values, but xdllm train runs one configuration: run it once per value, "
     "e.g. for v in 0.001 0.003; do xdllm train ... optim.lr=$v; done (quote a single value that contains a comma)"),
    (["eval", "ckpt=best.ckpt,last.ckpt"],
     "ckpt=best.ckpt,last.ckpt gives several values, but xdllm eval runs one configuration: run it once per value, "
     "e.g. for v in best.ckpt last.ckpt; do xdllm eval ... ckpt=$v; done (quote"),
    (["eval", "ckpt=runs/x", "predictor.threshold=0.5,0.9"],
     "do xdllm eval ... predictor.threshold=$v; done; xdllm generate -m sweeps it in one command"),
    (["train", "-m", "experiment=sort_mlm", "optim.lr=1e-3,3e-3"],
     "-m (a sweep) is for xdllm generate only: xdllm train runs one configuration; run it once per value"),
    (["eval", "ckpt=runs/x", "--multirun"], "-m (a sweep) is for xdllm generate only: xdllm eval runs one"),
])
def test_train_and_eval_refuse_several_values_in_one_line(argv, expected, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("xdllm: error: ") and expected in line, line


def test_a_value_with_a_comma_can_be_quoted(capsys):
    assert main(["train", "--cfg", "experiment=sort_mlm", "name='a,b'"]) == 0
    assert "name: a,b" in capsys.readouterr().out
