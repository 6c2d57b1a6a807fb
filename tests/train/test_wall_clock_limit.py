"""``trainer.max_time``: a time limit of one training process that saves, says how to continue,
and gives a resumed run the whole limit again (Lightning's own restored the time spent, so a run
resumed with its limit stopped at once, without a word)."""

import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import EXIT_TIME_LIMIT, main
from xdllm.errors import XdllmError
from xdllm.train.wall_clock_limit import WallClockLimit, wall_clock_limit


def _step(run_dir) -> int:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"]


def test_a_run_stops_at_its_time_limit_and_a_resume_gets_the_limit_again(tmp_path, capsys):
    run_dir = tmp_path / "run"
    limited = ["trainer.max_steps=100000", "trainer.val_check_interval=100000", "trainer.max_time=00:00:00:01"]
    assert main(["train", *TINY, *limited, f"run_dir={run_dir}"]) == EXIT_TIME_LIMIT
    first = _step(run_dir)
    assert 0 < first < 100000
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"xdllm: stopped by trainer.max_time=00:00:00:01 after step {first}, saved in "
        f"{run_dir / 'checkpoints' / 'last.ckpt'}; continue with: xdllm train resume={run_dir}")
    run_log = (run_dir / "train.log").read_text()
    assert run_log.endswith(f" stopped by trainer.max_time=00:00:00:01 after step {first}\n")
    assert main(["train", f"resume={run_dir}"]) == EXIT_TIME_LIMIT
    assert _step(run_dir) > first  # trained another second's steps


@pytest.mark.parametrize(("value", "message"), [
    ("abc", "trainer.max_time='abc' is not a duration: give DD:HH:MM:SS"),
    (10, "trainer.max_time=10 is not a duration: give DD:HH:MM:SS"),
    ("00:00:00:00", "trainer.max_time='00:00:00:00' must be longer than zero"),
])
def test_a_time_limit_that_is_no_duration_is_refused(value, message):
    with pytest.raises(XdllmError, match=message):
        wall_clock_limit(value)


def test_the_time_a_resumed_run_spent_before_is_not_restored():
    limit = wall_clock_limit("00:01:00:00")
    assert isinstance(limit, WallClockLimit) and wall_clock_limit(None) is None
    limit.load_state_dict({"time_elapsed": {"train": 7200.0}})
    assert limit.time_remaining() == 3600.0
