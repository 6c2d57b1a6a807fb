"""A generation stopped part-way (Ctrl-C, SIGTERM, an error) keeps the predictions of the batches
it finished in predictions.partial.jsonl, beside their history; SIGTERM stops any xdllm command
as Ctrl-C does, with status 143 (Python's default died on the spot: no cleanup, no word)."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.cli.terminate import Terminated, sigterm_raises_terminated
from xdllm.history import read_history_file
from xdllm.run import generate as generate_module
from xdllm.run import generation_check as check_module

GENERATE = ["num_samples=12", "batch_size=4", "history=topk", "history_tensorboard_samples=1"]


class _StopsAtCall:
    """The run's predictor, raising ``stop`` at its ``call``-th batch."""

    def __init__(self, predictor, stop: BaseException, call: int) -> None:
        self.predictor, self.stop, self.call, self.calls = predictor, stop, call, 0

    def predict(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.call:
            raise self.stop
        return self.predictor.predict(*args, **kwargs)


def _stop_at_call(monkeypatch, stop: BaseException, call: int) -> None:
    build = check_module._build_predictor
    monkeypatch.setattr(check_module, "_build_predictor",
                        lambda run, options: _StopsAtCall(build(run, options), stop, call))


def _log_lines(path: Path) -> list[str]:
    """A command log's lines without their time, blank lines and the attention backend's lines."""
    return [re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "", line) for line in path.read_text().splitlines()
            if line and "attention backend" not in line]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _summary(capsys) -> dict:
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


SUMMARY_FIGURES = ("num_samples", "mean_steps", "exact_match", "token_accuracy")


@pytest.mark.parametrize(("stop", "status", "said"), [(KeyboardInterrupt(), 130, "\nxdllm: interrupted\n"),
                                                      (Terminated(), 143, "xdllm: stopped by SIGTERM\n")])
def test_a_stopped_generation_keeps_its_batches_and_resume_finishes_it(run, tmp_path, monkeypatch, capsys, stop,
                                                                        status, said):
    whole = tmp_path / "whole"
    assert main(["generate", f"ckpt={run}", *GENERATE, f"output_dir={whole}"]) == 0
    whole_summary = _summary(capsys)
    whole_records = _lines(whole / "predictions.jsonl")
    _stop_at_call(monkeypatch, stop, 3)
    stopped = tmp_path / "stopped"
    assert main(["generate", f"ckpt={run}", *GENERATE, f"output_dir={stopped}"]) == status
    error = capsys.readouterr().err
    partial = stopped / "predictions.partial.jsonl"
    assert [(r["sample_index"], r["ids"]) for r in _lines(partial)] == \
        [(r["sample_index"], r["ids"]) for r in whole_records[:8]]
    assert not (stopped / "predictions.jsonl").exists()  # only a finished generation writes that
    assert len(list((stopped / "history").glob("history-*.pt"))) == 2
    assert (f"generation stopped after 8 samples: their predictions are in {partial}; their denoising history is "
            f"in {stopped / 'history'}; continue it with: xdllm generate resume={stopped}") in error
    assert error.endswith(said)
    monkeypatch.undo()
    assert main(["generate", f"ckpt={run}", *GENERATE, f"output_dir={stopped}"]) == 2  # never mixed with
    assert f"or continue the stopped one with: xdllm generate resume={stopped}" in capsys.readouterr().err
    assert main(["generate", f"resume={stopped}"]) == 0
    resumed = _summary(capsys)
    assert {k: resumed[k] for k in SUMMARY_FIGURES} == {k: whole_summary[k] for k in SUMMARY_FIGURES}
    assert [(r["sample_index"], r["ids"], r["exact_match"]) for r in _lines(stopped / "predictions.jsonl")] == \
        [(r["sample_index"], r["ids"], r["exact_match"]) for r in whole_records]
    assert sorted(path.name for path in stopped.iterdir()) == ["generate.log", "generate.yaml", "history",
                                                               "predictions.jsonl", "summary.json", "tensorboard"]
    assert json.loads((stopped / "summary.json").read_text()) == resumed  # what it printed
    # its log: the command that stopped, how (the refused one in between wrote nothing), then the resume
    log = _log_lines(stopped / "generate.log")
    assert log[0] == f"xdllm generate ckpt={run} {' '.join(GENERATE)} output_dir={stopped}"
    assert log[-5].startswith("warning: generation stopped after 8 samples")
    assert log[-4:-1] == [f"stopped by {'SIGTERM' if isinstance(stop, Terminated) else 'Ctrl-C'}",
                          f"xdllm generate resume={stopped}",
                          f"continuing the generation in {stopped} after its 8 finished samples"]
    assert json.loads(log[-1].removeprefix("result: ")) == resumed
    assert len(list((stopped / "history").glob("history-*.pt"))) == 3


class _StopsAfterCall(_StopsAtCall):
    """Raises ``stop`` once its ``call``-th batch is generated: its history file is written, its
    predictions not yet kept."""

    def predict(self, *args, **kwargs):
        self.calls += 1
        prediction = self.predictor.predict(*args, **kwargs)
        if self.calls == self.call:
            raise self.stop
        return prediction


def test_the_history_of_the_batch_under_way_goes_with_it(run, tmp_path, monkeypatch, capsys):
    build = check_module._build_predictor
    monkeypatch.setattr(check_module, "_build_predictor",
                        lambda run, options: _StopsAfterCall(build(run, options), KeyboardInterrupt(), 2))
    stopped = tmp_path / "stopped"
    assert main(["generate", f"ckpt={run}", *GENERATE, f"output_dir={stopped}"]) == 130
    assert len(_lines(stopped / "predictions.partial.jsonl")) == 4
    (kept,) = (stopped / "history").glob("history-*.pt")  # the second batch's file was written, then removed
    assert read_history_file(kept)["sample_ids"].tolist() == [0, 1, 2, 3]
    monkeypatch.undo()
    assert main(["generate", f"resume={stopped}"]) == 0
    recorded = [read_history_file(path)["sample_ids"].tolist()
                for path in sorted((stopped / "history").glob("history-*.pt"))]
    assert recorded == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_resume_is_refused_where_it_cannot_finish_the_same_generation(run, tmp_path, monkeypatch, capsys):
    _stop_at_call(monkeypatch, KeyboardInterrupt(), 2)
    stopped = tmp_path / "stopped"
    assert main(["generate", f"ckpt={run}", *GENERATE, f"output_dir={stopped}"]) == 130
    monkeypatch.undo()
    capsys.readouterr()

    def refused(*arguments: str) -> str:
        assert main(list(arguments)) == 2
        return capsys.readouterr().err

    assert "only device=, live=, data_path=, +frozen.NAME= may be given with it, not batch_size=2" in refused(
        "generate", f"resume={stopped}", "batch_size=2")
    assert "it takes no -m" in refused("generate", "-m", f"resume={stopped}", "device=cpu,auto")
    assert "xdllm eval writes nothing and has nothing to continue" in refused("eval", f"resume={stopped}")
    assert f"{tmp_path} is not a generation folder (no generate.yaml)" in refused("generate", f"resume={tmp_path}")
    assert f"resume={tmp_path / 'nowhere'}: no such folder" in refused("generate", f"resume={tmp_path / 'nowhere'}")
    record = stopped / "generate.yaml"
    record.write_text(record.read_text().replace("global_step: 2", "global_step: 1"))
    assert "now holds training step 2, but the generation" in refused("generate", f"resume={stopped}")
    record.write_text(record.read_text().replace("global_step: 1", "global_step: 2"))
    stale = stopped / "history" / ".history-00001.pt.tmp-999999999"  # a write killed outright
    stale.write_bytes(b"half a history file")
    assert main(["generate", f"resume={stopped}", "device=cpu"]) == 0
    assert not stale.exists()
    assert "holds a finished generation (predictions.jsonl)" in refused("generate", f"resume={stopped}")
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "generate.yaml").write_text(record.read_text())
    assert "holds no stopped generation to continue (no generation.partial.json or predictions.partial.jsonl)" \
        in refused("generate", f"resume={tmp_path / 'gen'}")


def test_resume_refuses_a_prompts_file_that_changed(run, tmp_path, monkeypatch, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("3 1 2 0\n9 9 1 5\n0 0 0 1\n2 2 1 1\n")
    _stop_at_call(monkeypatch, KeyboardInterrupt(), 2)
    stopped = tmp_path / "stopped"
    assert main(["generate", f"ckpt={run}", f"prompts_file={prompts}", "batch_size=2",
                 f"output_dir={stopped}"]) == 130
    monkeypatch.undo()
    capsys.readouterr()
    prompts.write_text("3 1 2 0\n9 9 1 5\n0 0 0 1\n2 2 1 7\n")  # the unfinished half edited
    assert main(["generate", f"resume={stopped}"]) == 2
    assert f"prompts_file {prompts} has changed since the generation in {stopped} started" in capsys.readouterr().err
    prompts.write_text("3 1 2 0\n9 9 1 5\n0 0 0 1\n2 2 1 1\n")  # put back as it was
    assert main(["generate", f"resume={stopped}"]) == 0
    assert [r["prompt"] for r in _lines(stopped / "predictions.jsonl")] == ["3 1 2 0", "9 9 1 5", "0 0 0 1",
                                                                           "2 2 1 1"]


class _StopsAtSweepCall:
    """Every predictor of a sweep, sharing one count of batches: ``stop`` at the ``call``-th."""

    def __init__(self, stop: BaseException, call: int) -> None:
        self.stop, self.call, self.calls = stop, call, 0

    def wrap(self, predictor):
        sweep = self

        class Stopping:
            def predict(self, *args, **kwargs):
                sweep.calls += 1
                if sweep.calls == sweep.call:
                    raise sweep.stop
                return predictor.predict(*args, **kwargs)
        return Stopping()


def _sweep(run: Path, folder: Path) -> list[str]:
    return ["generate", "-m", f"ckpt={run}", "predictor.max_steps=5,3", "num_samples=4", "batch_size=2",
            f"output_dir={folder}"]


def _stop_sweeps_at_call(monkeypatch, call: int) -> _StopsAtSweepCall:
    """Every predictor built from now on stops at the ``call``-th batch counted over all of them."""
    stopping = _StopsAtSweepCall(KeyboardInterrupt(), call)
    build = check_module._build_predictor
    monkeypatch.setattr(check_module, "_build_predictor", lambda run, options: stopping.wrap(build(run, options)))
    return stopping


def _sweep_lines(folder: Path) -> list[tuple]:
    return [(line["folder"], line["settings"], line["num_samples"], line["exact_match"])
            for line in _lines(folder / "sweep.jsonl")]


@pytest.mark.parametrize("stop_call", [2, 3])  # in the first generation; at the start of the second
def test_a_stopped_sweep_resumes_as_a_whole(run, tmp_path, monkeypatch, capsys, stop_call):
    assert main(_sweep(run, tmp_path / "whole")) == 0
    _stop_sweeps_at_call(monkeypatch, stop_call)
    stopped = tmp_path / "stopped"
    capsys.readouterr()
    assert main(_sweep(run, stopped)) == 130
    error = capsys.readouterr().err
    finished = stop_call // 3
    kept = f" (their results are in {stopped / 'sweep.jsonl'})" if finished else ""
    assert (f"the sweep stopped with {finished} of 2 generations finished{kept}; "
            f"continue it with: xdllm generate resume={stopped}") in error
    assert "continue it with: xdllm generate resume=" + str(stopped / "max_steps=5") not in error  # one way on
    monkeypatch.undo()
    assert main(_sweep(run, stopped)) == 2  # never run again over it
    assert f"or, if that sweep stopped part-way, continue it with: xdllm generate resume={stopped}" in \
        capsys.readouterr().err
    assert main(["generate", f"resume={stopped / 'max_steps=5'}"]) == 2
    assert (f"is one generation of the sweep in {stopped}: continue the sweep with: xdllm generate "
            f"resume={stopped}") in capsys.readouterr().err
    assert main(["generate", f"resume={stopped}"]) == 0
    assert _sweep_lines(stopped) == _sweep_lines(tmp_path / "whole")
    for name in ("max_steps=5", "max_steps=3"):
        assert [r["ids"] for r in _lines(stopped / name / "predictions.jsonl")] == \
            [r["ids"] for r in _lines(tmp_path / "whole" / name / "predictions.jsonl")]
        assert not (stopped / name / "predictions.partial.jsonl").exists()
        assert not (stopped / name / "generate.log").exists()  # the sweep's log holds theirs
    log = _log_lines(stopped / "generate.log")
    assert log[0] == " ".join(["xdllm", *_sweep(run, stopped)])
    stop = log.index("stopped by Ctrl-C")
    assert log[stop - 1].startswith("warning: the sweep stopped with")
    assert log[stop + 1:stop + 3] == [f"xdllm generate resume={stopped}",
                                      f"continuing the sweep in {stopped}: {finished} of 2 generations finished"]
    assert log[-4:] == ["the sweep's generations:", *log[-3:-1], "finished"]
    assert [line.split(":")[0] for line in log[-3:-1]] == ["  max_steps=5", "  max_steps=3"]
    capsys.readouterr()
    assert main(["generate", f"resume={stopped}"]) == 2
    assert f"the sweep in {stopped} has finished all 2 generations" in capsys.readouterr().err


def test_a_sweep_stopped_in_a_generations_views_resumes_with_its_summary(run, tmp_path, monkeypatch, capsys):
    with_history = ["history=topk", "history_tensorboard_samples=1"]
    assert main([*_sweep(run, tmp_path / "whole"), *with_history]) == 0
    write_views = generate_module.write_tensorboard

    def stopped_once(*args, **kwargs):
        monkeypatch.setattr(generate_module, "write_tensorboard", write_views)
        raise KeyboardInterrupt

    monkeypatch.setattr(generate_module, "write_tensorboard", stopped_once)
    stopped = tmp_path / "stopped"
    assert main([*_sweep(run, stopped), *with_history]) == 130
    assert (stopped / "max_steps=5" / "predictions.jsonl").exists() and not (stopped / "sweep.jsonl").exists()
    assert "the sweep stopped with 0 of 2 generations finished" in capsys.readouterr().err
    assert main(["generate", f"resume={stopped}"]) == 0
    assert f"continuing the sweep in {stopped}: 0 of 2 generations finished" in capsys.readouterr().err
    assert _sweep_lines(stopped) == _sweep_lines(tmp_path / "whole")
    for name in ("max_steps=5", "max_steps=3"):  # the views the stop cut short are drawn again, once
        views = list((stopped / name / "tensorboard").glob("*.history"))
        assert len(views) == 1 and _image_tags(views[0]) == _image_tags(
            next((tmp_path / "whole" / name / "tensorboard").glob("*.history")))


def _image_tags(event_file: Path) -> list[str]:
    """The image tags of a views event file, each once per picture, in order."""
    events = EventAccumulator(str(event_file), size_guidance={"images": 0})
    events.Reload()
    return [tag for tag in events.Tags()["images"] for _ in events.Images(tag)]


def _stop_writing_once(monkeypatch, name: str) -> None:
    """The generation's first atomic write of a file called ``name`` is stopped by Ctrl-C."""
    for writer in ("write_text_atomically", "write_jsonl_atomically"):
        write = getattr(generate_module, writer)

        def stopped_once(path, *args, _write=write, **kwargs):
            if Path(path).name == name:
                monkeypatch.undo()
                raise KeyboardInterrupt
            return _write(path, *args, **kwargs)
        monkeypatch.setattr(generate_module, writer, stopped_once)


@pytest.mark.parametrize("name", ["summary.json", "predictions.jsonl"])
def test_a_stop_while_the_results_are_written_keeps_every_batch(run, tmp_path, monkeypatch, capsys, name):
    whole = tmp_path / "whole"
    assert main(["generate", f"ckpt={run}", *GENERATE, f"output_dir={whole}"]) == 0
    _stop_writing_once(monkeypatch, name)
    stopped = tmp_path / "stopped"
    assert main(["generate", f"ckpt={run}", *GENERATE, f"output_dir={stopped}"]) == 130
    assert not (stopped / "predictions.jsonl").exists()
    assert f"generation stopped after 12 samples: their predictions are in {stopped}" in capsys.readouterr().err
    assert main(["generate", f"resume={stopped}"]) == 0
    assert [(r["sample_index"], r["ids"]) for r in _lines(stopped / "predictions.jsonl")] == \
        [(r["sample_index"], r["ids"]) for r in _lines(whole / "predictions.jsonl")]
    assert not (stopped / "predictions.partial.jsonl").exists()


def test_a_sweep_stopped_while_a_summary_is_written_resumes(run, tmp_path, monkeypatch):
    assert main(_sweep(run, tmp_path / "whole")) == 0
    _stop_writing_once(monkeypatch, "summary.json")
    stopped = tmp_path / "stopped"
    assert main(_sweep(run, stopped)) == 130
    assert main(["generate", f"resume={stopped}"]) == 0
    assert _sweep_lines(stopped) == _sweep_lines(tmp_path / "whole")


def test_a_sweep_resumes_only_from_the_weights_it_started_with(run, tmp_path, monkeypatch, capsys):
    _stop_sweeps_at_call(monkeypatch, 3)
    stopped = tmp_path / "stopped"
    assert main(_sweep(run, stopped)) == 130
    monkeypatch.undo()
    record = stopped / "sweep.yaml"
    record.write_text(record.read_text().replace("global_step: 2", "global_step: 1"))
    capsys.readouterr()
    assert main(["generate", f"resume={stopped}"]) == 2
    assert f"now holds training step 2, but the sweep in {stopped} started from step 1" in capsys.readouterr().err
    assert main(["generate", f"resume={stopped}", "predictor.max_steps=4"]) == 2
    assert "only device=, live=, data_path=, +frozen.NAME= may be given with it" in capsys.readouterr().err


def test_an_error_part_way_keeps_the_finished_batches_too(run, tmp_path, monkeypatch, capsys):
    _stop_at_call(monkeypatch, RuntimeError("CUDA out of memory"), 2)
    stopped = tmp_path / "stopped"
    with pytest.raises(RuntimeError, match="out of memory"):
        main(["generate", f"ckpt={run}", *GENERATE, f"output_dir={stopped}"])
    assert len(_lines(stopped / "predictions.partial.jsonl")) == 4
    assert "generation stopped after 4 samples" in capsys.readouterr().err


@pytest.mark.parametrize("stopping", ["before", "after"])
def test_nothing_finished_leaves_nothing(run, tmp_path, monkeypatch, stopping):
    # stopped before the first batch generated, or after it wrote its history but before its
    # predictions were kept
    build = check_module._build_predictor
    wrapper = _StopsAtCall if stopping == "before" else _StopsAfterCall
    monkeypatch.setattr(check_module, "_build_predictor",
                        lambda run, options: wrapper(build(run, options), KeyboardInterrupt(), 1))
    assert main(["generate", f"ckpt={run}", *GENERATE]) == 130
    assert not list((run / "generate").glob("*"))  # its generate.log went with the folder it made


def test_stopped_while_writing_the_views_the_predictions_are_whole(run, tmp_path, monkeypatch, capsys):
    def stopped_views(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(generate_module, "write_tensorboard", stopped_views)
    out = tmp_path / "gen"
    assert main(["generate", f"ckpt={run}", *GENERATE, f"output_dir={out}"]) == 130
    assert len(_lines(out / "predictions.jsonl")) == 12
    assert (f"the predictions are in {out / 'predictions.jsonl'}, but the TensorBoard views of their history were "
            f"not finished; draw them with: xdllm generate resume={out}") \
        in capsys.readouterr().err
    scalars = EventAccumulator(str(out / "tensorboard"))
    scalars.Reload()
    assert "generate/exact_match" in scalars.Tags()["scalars"]  # the results are in TensorBoard all the same
    monkeypatch.undo()
    assert main(["history", "tensorboard", str(out), "--logdir", str(out / "tensorboard")]) == 0
    assert len(list((out / "tensorboard").glob("*.history"))) == 1  # in place, beside the scalars (as resume=)


def test_a_stopped_generation_after_training_says_the_training_finished(tmp_path, monkeypatch, capsys):
    def stopped(*args, **kwargs):
        raise Terminated

    monkeypatch.setattr("xdllm.run.after_training.generate_after_training", stopped)
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", "generate_after_train=true",
                 f"run_dir={run_dir}"]) == 143
    assert (f"xdllm: training finished (checkpoints in {run_dir / 'checkpoints'}); the generation after it was "
            f"stopped: generate again with: xdllm generate ckpt={run_dir}\nxdllm: stopped by SIGTERM\n"
            ) in capsys.readouterr().err


def test_a_generation_after_training_stopped_after_a_batch_says_how_to_continue_it(tmp_path, monkeypatch, capsys):
    """Not how to generate again, from the first batch: the finished batches are kept."""
    _stop_at_call(monkeypatch, Terminated(), 2)
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", "generate_after_train=true",
                 "data.num_test_samples=72", f"run_dir={run_dir}"]) == 143
    [folder] = (run_dir / "generate").iterdir()
    assert 0 < len(_lines(folder / "predictions.partial.jsonl")) < 72
    assert (f"xdllm: training finished (checkpoints in {run_dir / 'checkpoints'}); the generation after it was "
            f"stopped: continue it with: xdllm generate resume={folder}\n") in capsys.readouterr().err
    monkeypatch.undo()
    assert main(["generate", f"resume={folder}"]) == 0
    assert len(_lines(folder / "predictions.jsonl")) == 72


@pytest.mark.slow
def test_a_real_sigterm_keeps_what_the_generation_finished_and_resume_finishes_it(run, tmp_path):
    out = tmp_path / "gen"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    process = subprocess.Popen([sys.executable, "-m", "xdllm.cli.main", "generate", f"ckpt={run}", "batch_size=1",
                                "history=topk", "history_tensorboard_samples=1", f"output_dir={out}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    deadline = time.monotonic() + 120
    # a batch's history file is written before its predictions are kept: two files, one batch kept
    while len(list((out / "history").glob("history-*.pt"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-2000:]
    assert stderr.endswith("xdllm: stopped by SIGTERM\n") and "Traceback" not in stderr
    kept = _lines(out / "predictions.partial.jsonl")
    assert 1 <= len(kept) < 64 and [r["sample_index"] for r in kept] == list(range(len(kept)))
    assert len(list((out / "history").glob("history-*.pt"))) == len(kept)  # one per batch of 1, none unfinished
    assert main(["generate", f"resume={out}"]) == 0
    whole = tmp_path / "whole"
    assert main(["generate", f"ckpt={run}", "batch_size=1", f"output_dir={whole}"]) == 0
    assert [r["ids"] for r in _lines(out / "predictions.jsonl")] == \
        [r["ids"] for r in _lines(whole / "predictions.jsonl")]
    assert len(list((out / "history").glob("history-*.pt"))) == 64


def test_sigterm_raises_terminated_once_and_the_handler_is_put_back():
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_raises_terminated():
        with pytest.raises(Terminated):
            signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # a second one while the first is handled: nothing
    assert signal.getsignal(signal.SIGTERM) is before
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # told to ignore it: left so
    try:
        with sigterm_raises_terminated():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


AFTER_THE_FIT = textwrap.dedent("""
    import signal
    import lightning as L
    from xdllm.cli.terminate import Terminated, sigterm_raises_terminated
    from xdllm.train.stop_on_interrupt import StopOnInterrupt
    with sigterm_raises_terminated():
        stopper, module = StopOnInterrupt(save=lambda trainer: None), L.LightningModule()
        trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, accelerator="cpu", devices=1)
        stopper.setup(trainer, module, "fit")
        stopper.on_train_start(trainer, module)
        stopper.teardown(trainer, module, "fit")
        signal.signal(signal.SIGTERM, stopper._on_signal)  # Lightning puts back the handler it found, later
        try:
            signal.raise_signal(signal.SIGTERM)
        except Terminated:
            print("Terminated")
""")


def test_after_the_fit_sigterm_goes_to_the_handler_found_before_it():
    # the generation after training: SIGTERM's default (death on the spot) lost its finished batches
    result = subprocess.run([sys.executable, "-c", AFTER_THE_FIT], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout) == (0, "Terminated\n"), result.stderr[-2000:]


def test_resume_refuses_edited_records_in_one_line(run, tmp_path, monkeypatch, capsys):
    stopping = _stop_sweeps_at_call(monkeypatch, 3)
    sweep = tmp_path / "sweep"
    assert main(_sweep(run, sweep)) == 130
    stopping.calls = 0
    single = tmp_path / "single"
    assert main(["generate", f"ckpt={run}", *GENERATE, f"output_dir={single}"]) == 130
    monkeypatch.undo()
    capsys.readouterr()
    broken = [
        (single / "generate.yaml", "bad: [", "generate.yaml cannot be read (while parsing a flow node)"),
        (single / "generate.yaml", "foo: 1", "generate.yaml lacks checkpoint, global_step, predictor_overrides"),
        (single / "generation.partial.json", "", "generation.partial.json is not JSON"),
        (single / "generation.partial.json", '{"batches": 1}', "generation.partial.json lacks samples, totals"),
        (single / "predictions.partial.jsonl", "{bad", "predictions.partial.jsonl:1 is not JSON"),
        (sweep / "sweep.yaml", "overrides: [", "sweep.yaml cannot be read"),
        (sweep / "sweep.yaml", "foo: 1", "sweep.yaml lacks overrides, checkpoint, global_step"),
        (sweep / "sweep.jsonl", "{bad", "sweep.jsonl:1 is not JSON"),
        (sweep / "sweep.jsonl", "[1]", "sweep.jsonl:1 names no folder"),
    ]
    for path, text, said in broken:
        kept = path.read_text()
        path.write_text(text)
        assert main(["generate", f"resume={path.parent}"]) == 2, path
        error = capsys.readouterr().err
        assert said in error and "it was edited or not written by xdllm" in error, error
        assert error.count("\n") == 1  # one line, no traceback
        path.write_text(kept)
    for folder in (single, sweep):
        assert main(["generate", f"resume={folder}"]) == 0
