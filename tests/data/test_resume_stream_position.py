"""A run resumed with another global batch (batch size, processes, accumulation) goes on from the
training stream position its checkpoint reached: no sample is read twice, none skipped."""

import pytest
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.data import datamodule
from xdllm.data.samplers import StreamIndex, TrainStreamBatchSampler


def test_the_steps_after_an_origin_follow_at_the_sampler_s_global_batch():
    sampler = TrainStreamBatchSampler(2, lambda: 4, rank=1, world_size=2, max_steps=6, origin=lambda: (4, 100))
    assert sampler.global_batch == 4
    assert list(sampler) == [[StreamIndex(102, 4), StreamIndex(103, 4)], [StreamIndex(106, 5), StreamIndex(107, 5)]]
    unchanged = TrainStreamBatchSampler(2, lambda: 4, rank=1, world_size=2, max_steps=5, origin=lambda: (0, 0))
    assert list(unchanged) == [[StreamIndex(18, 4), StreamIndex(19, 4)]]


@pytest.mark.slow
def test_a_run_resumed_with_another_batch_size_reads_on_from_where_it_stopped(tmp_path, monkeypatch):
    read: list[int] = []
    original = datamodule.TrainStream.__getitem__

    def recording(stream, index):
        read.append(index.position)
        return original(stream, index)

    monkeypatch.setattr(datamodule.TrainStream, "__getitem__", recording)
    run = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=4", "data.batch_size=8", f"run_dir={run}"]) == 0
    assert read == list(range(32))
    read.clear()
    assert main(["train", f"resume={run}", "trainer.max_steps=6", "data.batch_size=4",
                 "optim.accumulate_grad_batches=3"]) == 0
    assert read == list(range(32, 56))
    read.clear()
    assert main(["train", f"resume={run}", "trainer.max_steps=7", "data.batch_size=8"]) == 0
    assert read == list(range(56, 80))  # the accumulation given with the last resume is stored: 8 x 3
