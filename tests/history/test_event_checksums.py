"""TensorBoard event records checksummed in C: the values of tensorboard's own pure-Python CRC,
used by every writer xdllm opens, and files that TensorBoard reads back."""

import io
import random

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
from tensorboard.summary.writer import record_writer

from xdllm.event_checksums import fast_checksums_available, masked_crc32c, use_fast_event_checksums
from xdllm.event_files import event_writer
from xdllm.train.step_logger import OptimizerStepLogger

PURE_PYTHON = pywrap_tensorflow.crc32c  # the loop tensorboard's masked checksum runs without TensorFlow


def _pure_python_masked(data: bytes) -> int:
    crc = PURE_PYTHON(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@pytest.fixture
def pure_python_checksums(monkeypatch):
    """Tensorboard as installed, whatever an earlier test switched; restored afterwards."""
    monkeypatch.setattr(record_writer, "masked_crc32c", _pure_python_masked)
    monkeypatch.setattr(pywrap_tensorflow, "masked_crc32c", _pure_python_masked)


def test_the_c_checksum_is_tensorboard_s():
    assert fast_checksums_available()  # a dependency of xdllm: installed with it
    generator = random.Random(0)
    for size in (0, 1, 3, 8, 255, 4096, 150_001):
        data = bytes(generator.getrandbits(8) for _ in range(size))
        assert masked_crc32c(data) == _pure_python_masked(data), size


def test_a_record_is_written_with_the_same_bytes(pure_python_checksums):
    data = bytes(range(256)) * 40
    slow = io.BytesIO()
    record_writer.RecordWriter(slow).write(data)
    use_fast_event_checksums()
    assert record_writer.masked_crc32c is masked_crc32c
    fast = io.BytesIO()
    record_writer.RecordWriter(fast).write(data)
    assert fast.getvalue() == slow.getvalue()


def test_xdllm_s_writers_checksum_in_c_and_tensorboard_reads_their_files(tmp_path, pure_python_checksums):
    with event_writer(tmp_path) as writer:
        assert record_writer.masked_crc32c is masked_crc32c
        for step in range(3):
            writer.add_scalar("loss", 1.0 / (step + 1), step)
        writer.add_text("card", "x" * 70_000, 0)
    reader = EventAccumulator(str(tmp_path))
    reader.Reload()
    assert [event.value for event in reader.Scalars("loss")] == pytest.approx([1.0, 0.5, 1 / 3])
    pywrap_tensorflow.masked_crc32c = _pure_python_masked  # the reader checks every record the slow way too
    slow_reader = EventAccumulator(str(tmp_path))
    slow_reader.Reload()
    assert len(slow_reader.Scalars("loss")) == 3 and slow_reader.Tags()["tensors"]


def test_the_training_logger_checksums_in_c(tmp_path, pure_python_checksums):
    OptimizerStepLogger(save_dir=str(tmp_path), name="tensorboard", version="")
    assert record_writer.masked_crc32c is masked_crc32c and pywrap_tensorflow.masked_crc32c is masked_crc32c
