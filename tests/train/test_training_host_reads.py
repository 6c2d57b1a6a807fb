"""Training steps read no logged metric back to the host between logging steps.

On a GPU each such read (``item()``, ``float()`` of a device tensor) makes the host wait for the
step to finish, so the loop's work between steps runs while the GPU idles. Counted on the CPU:
reads of floating-point tensors from outside torch during the training loop (the optimizer's own
reads of its CPU step counter and the loader's integer reads are not metrics; the loss's
``nonzero`` of the supervised mask is a boolean read and not counted here).
"""

import sys
from collections import Counter

import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.train.module import DiffusionLMModule

READS = ("item", "__float__", "__int__", "__bool__", "tolist")
STEPS = 12


@pytest.fixture
def metric_reads(monkeypatch):
    """Counts, by caller, the floating-point tensor reads made between the start of training
    and its first validation."""
    counts: Counter = Counter()
    training = {"on": False}

    def counted(name, original):
        def read(tensor, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if training["on"] and tensor.is_floating_point() and "/torch/" not in caller:
                counts[caller] += 1
            return original(tensor, *args, **kwargs)
        return read

    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, counted(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(DiffusionLMModule, "on_train_start", lambda self: training.update(on=True), raising=False)
    monkeypatch.setattr(DiffusionLMModule, "on_validation_start", lambda self: training.update(on=False),
                        raising=False)
    return counts


def _train(tmp_path, *overrides):
    main(["train", *TINY, f"trainer.max_steps={STEPS}", f"trainer.val_check_interval={STEPS}",
          "trainer.log_every_n_steps=100", f"run_dir={tmp_path / 'run'}", *overrides])


@pytest.mark.parametrize("progress", ["lines", "bar"])
def test_no_metric_read_between_logging_steps(metric_reads, tmp_path, progress):
    _train(tmp_path, f"progress={progress}", "trainer.enable_progress_bar=true", "progress_every_n_steps=100")
    assert sum(metric_reads.values()) == 0, metric_reads


def test_the_bar_reads_the_loss_every_n_steps(metric_reads, tmp_path):
    _train(tmp_path, "progress=bar", "trainer.enable_progress_bar=true", "progress_every_n_steps=4")
    # at the same steps, the run log's metric lines read the step's three scalars (grad norm, loss,
    # masked tokens): the bar's read has waited for the step already
    assert {caller.rsplit("/", 1)[-1]: n for caller, n in metric_reads.items()} == {
        "progress_bar.py": STEPS // 4, "metric_lines.py": 3 * (STEPS // 4)}
