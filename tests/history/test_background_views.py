"""Validation history's TensorBoard views drawn in another process (ValidationHistory background)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import lightning as L
import pytest
from history_fakes import fake_generate
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.history import HistoryTopKPlugin, figures, write_tensorboard
from xdllm.train.history_hook import ValidationHistory

TOKENIZER = SymbolTokenizer(list("abcdefgh"))


TRAINER = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False)
MODULE = L.LightningModule()


def _validate(hook: ValidationHistory, step: int) -> None:
    """What a validation does to the hook: record two batches, then end."""
    recorder = hook.recorder_for_step(step)
    fake_generate(recorder, prompt_lens=[2, 3], gen_len=4, commits_per_step=[1, 2], seed=step)
    fake_generate(recorder, prompt_lens=[2, 2], gen_len=4, commits_per_step=[3, 3], seed=step + 1)
    hook.on_validation_end(TRAINER, MODULE)


def _views(logdir) -> dict:
    events = EventAccumulator(str(logdir), size_guidance={"tensors": 0, "images": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    images = {tag: [(e.step, e.encoded_image_string) for e in events.Images(tag)] for tag in tags["images"]}
    texts = {tag: [(e.step, tensor_util.make_ndarray(e.tensor_proto).item()) for e in events.Tensors(tag)]
             for tag in tags["tensors"]}
    return {"images": images, "texts": texts}


def _refuse_to_draw(*args, **kwargs):
    raise AssertionError("drawn in the training process")


def test_in_the_background_the_views_are_drawn_elsewhere_and_equal_the_inline_ones(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(figures.DenoisingFigure, "picture", _refuse_to_draw)  # this process only
    hook = ValidationHistory(tmp_path / "run", TOKENIZER, num_samples=3, k=2, background=True)
    _validate(hook, 2)
    _validate(hook, 4)
    with caplog.at_level(logging.INFO, logger="xdllm.train.background_views"):
        hook.teardown(TRAINER, MODULE, "fit")  # waits for both
    # the worker takes seconds to start: the last validation at least is still queued, and the wait is said
    assert re.search(r"waiting for the TensorBoard views of [12] validation\(s\) still being drawn in another "
                     r"process \((val-step0000002, )?val-step0000004\)", caplog.text), caplog.text

    monkeypatch.undo()
    for step in (2, 4):
        inline = tmp_path / f"inline{step}"
        write_tensorboard([tmp_path / "run" / "history" / f"val-step{step:07d}"], inline, max_samples=3,
                          tokenizer=TOKENIZER)
        background = _views(tmp_path / "run" / "tensorboard" / f"history-step{step:07d}")
        assert background == _views(inline)  # the stored token strings stand in for the tokenizer
        assert len(background["images"]) == 3 and all(len(steps) > 1 for steps in background["images"].values())


def test_on_the_cpu_the_views_are_drawn_inline(tmp_path, monkeypatch):
    hook = ValidationHistory(tmp_path / "run", TOKENIZER, num_samples=3, k=2)
    hook.setup(TRAINER, MODULE, "fit")
    assert hook.background is False
    monkeypatch.setattr(figures.DenoisingFigure, "picture", _refuse_to_draw)
    with pytest.raises(AssertionError, match="drawn in the training process"):
        _validate(hook, 2)



def test_a_view_that_fails_is_reported_with_the_command_that_draws_it_again(tmp_path, caplog):
    hook = ValidationHistory(tmp_path / "run", TOKENIZER, num_samples=3, k=2, background=True)
    logdir = tmp_path / "run" / "tensorboard" / "history-step0000002"
    logdir.parent.mkdir(parents=True)
    logdir.write_text("a file where the event folder goes")
    _validate(hook, 2)
    with caplog.at_level(logging.ERROR, logger="xdllm.train.background_views"):
        hook.on_exception(TRAINER, MODULE, RuntimeError("training failed"))
    history = tmp_path / "run" / "history" / "val-step0000002"
    assert f"the TensorBoard views of {history} were not written" in caplog.text
    assert f"xdllm history tensorboard {history} --logdir {logdir}" in caplog.text


def test_a_training_script_without_a_main_guard_runs_once(tmp_path):
    """The worker is a fresh interpreter running its own module: a multiprocessing child would
    import the caller's script again and, with no ``__main__`` guard, run it a second time."""
    history = tmp_path / "history"
    recorder = HistoryTopKPlugin(k=2, output_dir=history, tokenizer=TOKENIZER, split="validation")
    fake_generate(recorder, prompt_lens=[2, 3], gen_len=4, commits_per_step=[1, 2], seed=1)
    marker, logdir = tmp_path / "ran.txt", tmp_path / "views"
    script = tmp_path / "train.py"
    script.write_text(
        "from pathlib import Path\n"
        "from xdllm.train.background_views import BackgroundViews\n"
        f"with open({str(marker)!r}, 'a') as ran:\n"
        "    ran.write('ran\\n')\n"
        "views = BackgroundViews()\n"
        f"views.submit(Path({str(history)!r}), Path({str(logdir)!r}), 3, None)\n"
        "views.finish()\n")
    subprocess.run([sys.executable, str(script)], check=True, timeout=120, cwd=tmp_path)
    assert marker.read_text() == "ran\n"
    assert len(_views(logdir)["images"]) == 2


@pytest.mark.parametrize("background", [False, True])
def test_an_unreadable_history_file_is_reported_and_the_others_drawn(tmp_path, caplog, background):
    hook = ValidationHistory(tmp_path / "run", TOKENIZER, num_samples=3, k=2, background=background)
    recorder = hook.recorder_for_step(2)
    fake_generate(recorder, prompt_lens=[2, 3], gen_len=4, commits_per_step=[1, 2], seed=2)
    garbled = tmp_path / "run" / "history" / "val-step0000002" / "history-00001.pt"
    garbled.write_bytes(b"not a history file")
    with caplog.at_level(logging.ERROR, logger="xdllm.train.background_views"):
        hook.on_validation_end(TRAINER, MODULE)
        hook.teardown(TRAINER, MODULE, "fit")
    assert f"skipped an unreadable file: {garbled}" in caplog.text
    assert len(_views(tmp_path / "run" / "tensorboard" / "history-step0000002")["images"]) == 2
