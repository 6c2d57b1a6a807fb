"""A write that a full disk cuts short is one line naming the file: a checkpoint's (with the step
and how to go on), a generation's predictions (keeping what can be kept), TensorBoard's events.

torch's zip writer hides the write's ``OSError`` behind its own ``RuntimeError`` ("unexpected
pos ...") when its cleanup fails after it; seen with a real 3 MB and 25 MB tmpfs. Here writes go
to ``/dev/full``, which refuses every write with ENOSPC, as a full disk does.
"""

import builtins
import errno
import json
import os
import re
import threading
from pathlib import Path

import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.event_files import QuietEventWriterThreads, event_writer
from xdllm.temporary_files import torch_save_atomically, write_jsonl_atomically

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


def _writes_to_dev_full(monkeypatch, name_part: str) -> None:
    """xdllm's atomic writes of files whose name holds ``name_part`` go to ``/dev/full``."""
    def open_on_a_full_disk(file, mode="r", *args, **kwargs):
        if name_part in os.fspath(file) and "w" in mode:
            return builtins.open("/dev/full", mode, *args, **kwargs)
        return builtins.open(file, mode, *args, **kwargs)

    monkeypatch.setattr("xdllm.temporary_files.open", open_on_a_full_disk, raising=False)


def _checkpoints_to_dev_full(monkeypatch) -> None:
    _writes_to_dev_full(monkeypatch, "ckpt")


def test_a_write_the_disk_refuses_is_named_by_the_file_it_was_for(tmp_path, monkeypatch):
    _checkpoints_to_dev_full(monkeypatch)
    target = tmp_path / "last.ckpt"
    with pytest.raises(OSError) as refused:
        torch_save_atomically({"weights": torch.zeros(100_000)}, target)
    assert (refused.value.errno, refused.value.filename) == (errno.ENOSPC, str(target))
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary one


def test_a_failed_write_hidden_behind_the_zip_writers_cleanup_is_found(tmp_path, monkeypatch):
    def save_as_torch_did_on_a_full_tmpfs(obj, handle):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 2932352 vs 2932240")

    monkeypatch.setattr(torch, "save", save_as_torch_did_on_a_full_tmpfs)
    with pytest.raises(OSError) as refused:
        torch_save_atomically({}, tmp_path / "best.ckpt")
    assert (refused.value.errno, refused.value.filename) == (errno.ENOSPC, str(tmp_path / "best.ckpt"))


def test_training_stopped_by_a_full_disk_is_one_line(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    _checkpoints_to_dev_full(monkeypatch)
    assert main(["train", *TINY, "trainer.max_steps=4", "trainer.val_check_interval=4",
                 "checkpoint.last_every_n_steps=2", f"run_dir={run_dir}"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == (f"xdllm: error: No space left on device: {Path(run_dir) / 'checkpoints' / 'last.ckpt'} "
                     "(training stopped at step 2)")


def test_a_text_write_the_disk_refuses_is_named_by_the_file_it_was_for(tmp_path, monkeypatch):
    _writes_to_dev_full(monkeypatch, "jsonl")
    with pytest.raises(OSError) as refused:
        write_jsonl_atomically(tmp_path / "predictions.jsonl", [{"text": "x" * 10_000}])
    assert (refused.value.errno, refused.value.filename) == (errno.ENOSPC, str(tmp_path / "predictions.jsonl"))
    assert list(tmp_path.iterdir()) == []


def test_predictions_refused_by_a_full_disk_keep_the_finished_batches_to_continue(run, tmp_path, monkeypatch,
                                                                                    capsys):
    out = tmp_path / "gen"
    with monkeypatch.context() as patch:
        _writes_to_dev_full(patch, "predictions.jsonl")  # not predictions.partial.jsonl
        assert main(["generate", f"ckpt={run}", "batch_size=16", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == f"xdllm: error: No space left on device: {out / 'predictions.jsonl'}"
    assert "generation stopped after 64 samples" in err
    assert sorted(path.name for path in out.iterdir()) == [  # no summary.json of predictions never written
        "generate.log", "generate.yaml", "generation.partial.json", "predictions.partial.jsonl"]
    assert main(["generate", f"resume={out}"]) == 0
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 64
    assert json.loads((out / "summary.json").read_text())["num_samples"] == 64


def test_a_generation_that_can_keep_nothing_says_so_and_names_the_predictions(run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "gen"
    _writes_to_dev_full(monkeypatch, "predictions")
    assert main(["generate", f"ckpt={run}", "batch_size=16", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2:] == [
        f"the 64 finished samples could not be kept either (No space left on device: "
        f"{out / 'predictions.partial.jsonl'})",
        f"xdllm: error: No space left on device: {out / 'predictions.jsonl'}"]
    assert not out.exists()  # nothing half-kept: a state without its predictions, a summary without them


def test_an_earlier_stop_s_batches_stay_whole_when_keeping_more_fails(run, tmp_path, monkeypatch):
    from xdllm.run.partial_generation import PARTIAL_PREDICTIONS, PARTIAL_STATE, read_partial, write_partial

    out = tmp_path / "gen"
    with monkeypatch.context() as patch:
        _writes_to_dev_full(patch, "predictions.jsonl")
        main(["generate", f"ckpt={run}", "batch_size=16", f"output_dir={out}"])
    kept = read_partial(out, torch.device("cpu"))
    state = (out / PARTIAL_STATE).read_text()
    more = kept.plus([], 1.0)
    more.records.append({"sample_index": 64})
    _writes_to_dev_full(monkeypatch, "partial.jsonl")
    with pytest.raises(OSError):
        write_partial(out, more)
    assert (out / PARTIAL_STATE).read_text() == state  # the pair as it was: it can still be continued
    assert len(read_partial(out, torch.device("cpu")).records) == 64 == len(
        (out / PARTIAL_PREDICTIONS).read_text().splitlines())


def _event_writes_fail(monkeypatch) -> None:
    from tensorboard.summary.writer.record_writer import RecordWriter

    def full_disk(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RecordWriter, "write", full_disk)


def test_a_failed_event_write_reaches_the_writer_s_caller_named_with_its_folder(tmp_path, monkeypatch):
    _event_writes_fail(monkeypatch)
    monkeypatch.setattr(threading, "excepthook", QuietEventWriterThreads(threading.excepthook))
    with pytest.raises(OSError) as refused, event_writer(tmp_path / "tb") as writer:
        writer.add_scalar("generate/exact_match", 1.0, 0)  # the writer's thread fails after it returned
    assert (refused.value.errno, refused.value.filename) == (errno.ENOSPC, str(tmp_path / "tb"))


def test_the_writer_thread_s_own_report_of_it_is_dropped(tmp_path, monkeypatch):
    reported = []
    monkeypatch.setattr(threading, "excepthook", QuietEventWriterThreads(reported.append))
    _event_writes_fail(monkeypatch)
    with pytest.raises(OSError), event_writer(tmp_path / "tb") as writer:
        writer.add_scalar("x", 1.0, 0)
    failing = threading.Thread(target=lambda: 1 / 0)
    failing.start()
    failing.join()
    assert [type(args.exc_value) for args in reported] == [ZeroDivisionError]  # others still reported


def test_training_whose_tensorboard_writes_fail_is_one_line_with_the_step(tmp_path, monkeypatch, capfd):
    from tensorboard.summary.writer.record_writer import RecordWriter

    write, calls = RecordWriter.write, []

    def full_after_a_few_writes(self, data):
        calls.append(1)
        if len(calls) > 12:
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(self, data)

    monkeypatch.setattr(RecordWriter, "write", full_after_a_few_writes)
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=8", "trainer.val_check_interval=4",
                 "checkpoint.last_every_n_steps=2", f"run_dir={run_dir}"]) == 2
    err = capfd.readouterr().err
    assert re.fullmatch(rf"xdllm: error: No space left on device \(training stopped at step \d; once fixed, "
                        rf"continue with: xdllm train resume={re.escape(str(run_dir))}\)", err.strip().splitlines()[-1])
    assert "Exception in thread" not in err and "Traceback" not in err
