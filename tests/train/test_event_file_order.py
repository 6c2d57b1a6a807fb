"""TensorBoard reads a folder's event files in name order, and the names start with the second
each was made: the training logger makes its file in a later second than those before it, so a
run resumed at once (a short run, from Python) is read after the run it continues."""

import time

from xdllm.event_files import after_the_event_files_in
from xdllm.train.step_logger import OptimizerStepLogger


def test_the_training_logger_names_its_event_file_after_the_newest_in_its_folder(tmp_path):
    folder = tmp_path / "tensorboard"
    folder.mkdir()
    newest = int(time.time()) + 1  # made in this second or the next: the counter after it would sort first
    before = f"events.out.tfevents.{newest}.vm.7.9"
    (folder / before).write_bytes(b"")
    logger = OptimizerStepLogger(save_dir=str(tmp_path), name="tensorboard", version="")
    logger.log_metrics({"train/loss": 1.0}, step=0)
    logger.finalize("success")
    files = sorted(path.name for path in folder.glob("events.out.tfevents.*"))
    assert len(files) == 2 and files[0] == before
    assert int(files[1].split(".")[3]) > newest


def test_only_a_file_of_this_second_is_waited_for(tmp_path, monkeypatch):
    import xdllm.event_files

    waits = []
    monkeypatch.setattr(xdllm.event_files.time, "sleep", waits.append)
    after_the_event_files_in(tmp_path / "missing")
    (tmp_path / "events.out.tfevents.1000.vm.1.0").write_bytes(b"")  # long ago
    (tmp_path / "events.out.tfevents.x.vm.1.0").write_bytes(b"")  # no stamp: not read as one
    after_the_event_files_in(tmp_path)
    assert waits == []
    (tmp_path / f"events.out.tfevents.{int(time.time()) + 3600}.vm.1.0").write_bytes(b"")  # a clock set back since
    after_the_event_files_in(tmp_path)
    assert waits == []
    now = int(time.time())
    (tmp_path / "future").mkdir()
    (tmp_path / "future" / f"events.out.tfevents.{now}.vm.1.0").write_bytes(b"")
    after_the_event_files_in(tmp_path / "future")
    assert len(waits) == 1 and 0 < waits[0] <= 1
