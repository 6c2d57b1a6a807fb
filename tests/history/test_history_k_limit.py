"""A history keeping more top-k tokens than the vocabulary has is refused before anything runs,
naming the option: training raised a ValueError traceback at its first validation, after the
training steps."""

import pytest
from tiny_run import TINY

import xdllm
from xdllm.cli.main import main
from xdllm.errors import XdllmError

VOCAB = 46  # the built-in tokenizer


def _refusal(option: str) -> str:
    return (f"{option}={VOCAB + 1} is more than the tokenizer's {VOCAB} tokens, the most a step's top-k can hold: "
            f"set {option} to at most {VOCAB}")


def test_history_k_past_the_vocabulary_is_refused_by_train_generate_and_complete(tmp_path, capsys):
    run = tmp_path / "run"
    overrides = [item for item in TINY if not item.startswith("history.num_samples=")]
    assert main(["train", *overrides, "history.num_samples=2", f"history.k={VOCAB + 1}", "trainer.max_steps=2",
                 f"run_dir={run}"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"xdllm: error: {_refusal('history.k')}"]
    assert not run.exists()
    assert main(["train", *overrides, "history.num_samples=2", f"history.k={VOCAB}", "trainer.max_steps=2",
                 "trainer.val_check_interval=2", f"run_dir={run}"]) == 0  # the whole vocabulary: recorded
    assert list((run / "history").glob("*/history-*.pt"))
    capsys.readouterr()
    assert main(["generate", f"ckpt={run}", "history=topk", f"history_k={VOCAB + 1}", "num_samples=2",
                 f"output_dir={tmp_path / 'out'}"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"xdllm: error: {_refusal('history_k')}"]
    assert not (tmp_path / "out").exists()
    with pytest.raises(XdllmError, match=f"^{_refusal('history_k')}$"):
        xdllm.complete(run, ["1 2 3 4"], history_dir=tmp_path / "h", history_k=VOCAB + 1)
