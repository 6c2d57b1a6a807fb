"""Off a terminal, training prints plain timestamped metric lines, never a redrawn progress bar."""

import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest.mock import Mock

import lightning as L
import pytest
from tiny_run import TINY_RUN

from xdllm.errors import XdllmError
from xdllm.run.train import progress_as_lines
from xdllm.train.metric_lines import MetricLines


def test_logs_off_a_terminal_are_plain_lines(external_models: Path, tmp_path):
    overrides = [o for o in TINY_RUN if not o.startswith("trainer.enable_progress_bar")]
    env = {k: v for k, v in os.environ.items() if k != "XDLLM_RUN_DIR"}
    result = subprocess.run(
        [sys.executable, "-m", "xdllm.cli.main", "train", *overrides, "model=toyfam",
         f"model_search_path=[{external_models}]", "trainer.max_steps=4", "progress_every_n_steps=2",
         "trainer.val_check_interval=4", f"run_dir={tmp_path / 'run'}"],
        capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    log = result.stdout + result.stderr
    assert "\r" not in log and "\x1b[" not in log  # no bar redraws, no cursor escapes
    assert "Tip" not in log and "litlogger" not in log  # Lightning's advertisement is silenced
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    steps = re.findall(rf"^{stamp} step (\d+)/4 .*train/loss=[0-9.e-]+ .*steps/s\)$", log, re.M)
    assert steps == ["2", "4"]
    assert re.search(rf"^{stamp} validation at step 4 \(\d+\.\d s\): val/exact_match=\S+ .*val/loss=\S+", log, re.M)
    assert re.search(rf"^{stamp} trained 4 steps in \d+\.\d s: \d+\.\d steps/s, and 1 validation in \d+\.\d s$",
                     log, re.M)


class _Stream:
    def __init__(self, terminal: bool) -> None:
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


@pytest.mark.parametrize("stdout, stderr, progress, bar_enabled, lines", [
    (True, True, "auto", True, False),  # a terminal: the bar
    (False, True, "auto", True, True),  # xdllm train > log.txt: the bar would go to the file
    (True, False, "auto", True, True),  # xdllm train 2> log.txt
    (True, True, "auto", False, True),  # bar turned off: metrics still shown, as lines
    (False, False, "bar", True, False),
    (True, True, "lines", True, True),
])
def test_bar_only_when_both_streams_are_a_terminal(monkeypatch, stdout, stderr, progress, bar_enabled, lines):
    monkeypatch.setattr(sys, "stdout", _Stream(stdout))
    monkeypatch.setattr(sys, "stderr", _Stream(stderr))
    assert progress_as_lines(progress, bar_enabled) is lines


def test_unknown_progress_is_refused():
    with pytest.raises(XdllmError, match="progress must be one of auto, bar, lines"):
        progress_as_lines("dots")


def _trainer() -> L.Trainer:
    trainer = Mock(spec=L.Trainer)
    trainer.configure_mock(global_step=0, max_steps=40, is_global_zero=True, sanity_checking=False,
                           callback_metrics={"train/loss": 1.0, "val/loss": 2.0})
    return trainer


def test_a_validation_is_not_counted_in_the_training_rate(monkeypatch, caplog):
    """10 steps in 1 s, a 9 s validation, 10 more steps in 1 s: both lines say 10 steps/s, the
    validation line its 9 s and the last line the whole (the second line used to say 1 step/s,
    the validation counted in)."""
    clock = iter([0.0, 1.0, 1.0, 10.0, 11.0, 11.0])
    monkeypatch.setattr("xdllm.train.metric_lines.time.perf_counter", lambda: next(clock))
    lines, trainer, module = MetricLines(every_n_steps=10), _trainer(), Mock(spec=L.LightningModule)
    with caplog.at_level(logging.INFO, logger="xdllm.train.metric_lines"):
        lines.on_train_start(trainer, module)
        trainer.global_step = 10
        lines.on_train_batch_end(trainer, module, None, None, 9)
        lines.on_validation_start(trainer, module)
        lines.on_validation_end(trainer, module)
        trainer.global_step = 20
        lines.on_train_batch_end(trainer, module, None, None, 19)
        lines.on_train_end(trainer, module)
    messages = [record.getMessage() for record in caplog.records]
    assert messages[0].endswith("(10.0 steps/s)")
    assert "validation at step 10 (9.0 s): val/loss=2" in messages[1]
    assert messages[2].endswith("(10.0 steps/s)")
    assert messages[3].endswith(" trained 20 steps in 11.0 s: 10.0 steps/s, and 1 validation in 9.0 s")
