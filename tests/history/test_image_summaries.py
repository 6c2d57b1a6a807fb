"""ImageSummaryQueue: pictures encoded on worker threads, written as add_image writes them."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from xdllm.history.image_summaries import ImageSummaryQueue, encode_png


def _pictures(count: int) -> list[Image.Image]:
    """Different sizes (the largest first, so it finishes encoding last) and random pixels."""
    generator = np.random.default_rng(0)
    return [Image.fromarray(generator.integers(0, 256, (60 - 5 * i, 40 + i, 3), dtype=np.uint8))
            for i in range(count)]


def _images(logdir, tag: str):
    events = EventAccumulator(str(logdir), size_guidance={"images": 0})
    events.Reload()
    return events.Images(tag) if tag in events.Tags()["images"] else []


def test_pictures_are_written_in_the_order_added_as_add_image_writes_them(tmp_path):
    pictures = _pictures(9)
    with SummaryWriter(tmp_path / "queue") as writer, ImageSummaryQueue(writer, workers=3) as queue:
        encoded = [queue.add("views/denoising", picture, global_step=10 * i) for i, picture in enumerate(pictures)]
    with SummaryWriter(tmp_path / "plain") as writer:
        for i, picture in enumerate(pictures):
            writer.add_image("views/denoising", np.asarray(picture), global_step=10 * i, dataformats="HWC")
    written, plain = _images(tmp_path / "queue", "views/denoising"), _images(tmp_path / "plain", "views/denoising")
    assert [event.step for event in written] == [10 * i for i in range(9)]
    for event, reference, picture, future in zip(written, plain, pictures, encoded):
        assert (event.height, event.width) == (reference.height, reference.width) == (picture.height, picture.width)
        decoded = np.asarray(Image.open(io.BytesIO(event.encoded_image_string)))
        assert np.array_equal(decoded, np.asarray(picture))
        assert future.result() == event.encoded_image_string


def test_leaving_on_an_error_writes_no_pending_picture(tmp_path):
    with pytest.raises(RuntimeError, match="drawing failed"):
        with SummaryWriter(tmp_path) as writer, ImageSummaryQueue(writer, workers=1) as queue:
            queue.add("views/denoising", _pictures(1)[0], global_step=0)
            raise RuntimeError("drawing failed")
    assert _images(tmp_path, "views/denoising") == []


def test_at_most_two_pictures_per_worker_wait(tmp_path):
    with SummaryWriter(tmp_path) as writer, ImageSummaryQueue(writer, workers=1) as queue:
        for i, picture in enumerate(_pictures(6)):
            queue.add("views/denoising", picture, global_step=i)
            writer.flush()
            assert len(_images(tmp_path, "views/denoising")) >= i + 1 - 2  # the older ones written
    assert len(_images(tmp_path, "views/denoising")) == 6


@pytest.mark.parametrize("mode, shape", [("RGB", (37, 23, 3)), ("RGBA", (5, 64, 4)), ("L", (19, 7)),
                                         ("RGB", (1, 9, 3))])
def test_encode_png_writes_a_png_that_decodes_to_the_same_pixels(mode, shape):
    generator = np.random.default_rng(1)
    pixels = generator.integers(0, 256, shape, dtype=np.uint8)
    pixels[len(pixels) // 2:] = pixels[0]  # repeated rows, as a picture of cells has: the "Up" filter's zeros
    picture = Image.fromarray(pixels, mode)
    png = encode_png(picture)
    decoded = Image.open(io.BytesIO(png))
    decoded.load()  # reads every chunk: a wrong CRC or length fails here
    assert decoded.mode == mode and decoded.size == picture.size
    assert np.array_equal(np.asarray(decoded), pixels)


def test_encode_png_refuses_a_mode_it_does_not_write():
    with pytest.raises(ValueError, match="encode_png takes pictures of mode L, RGB, RGBA, not P"):
        encode_png(Image.new("P", (4, 4)))
