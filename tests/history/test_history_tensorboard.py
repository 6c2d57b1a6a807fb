"""write_tensorboard, read back with TensorBoard's own event reader."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.history import HistoryTopKPlugin, load_history, write_tensorboard
from xdllm.history.tensorboard import escape_markdown, png_path

TOKENIZER = SymbolTokenizer(list("abcdefgh"))


@pytest.fixture
def written(tmp_path, generate):
    recorder = HistoryTopKPlugin(k=3, output_dir=tmp_path / "run" / "history", tokenizer=TOKENIZER)
    generate(recorder, prompt_lens=[2, 3], gen_len=4, commits_per_step=[1, 2], seed=1)
    generate(recorder, prompt_lens=[2, 2], gen_len=4, commits_per_step=[3, 3], seed=2)
    count = write_tensorboard(tmp_path / "run", tmp_path / "tb", max_samples=3).written
    events = EventAccumulator(str(tmp_path / "tb"),
                              size_guidance={"tensors": 0, "images": 0, "scalars": 0})
    events.Reload()
    return count, events, recorder.files_written[0]


def _text(events, tag) -> dict[int, str]:
    return {e.step: tensor_util.make_ndarray(e.tensor_proto).item().decode()
            for e in events.Tensors(tag)}


def test_max_samples_and_tags(written):
    count, events, _ = written
    assert count == 3
    tags = events.Tags()
    assert sorted(tags["scalars"]) == [f"sample_0000{i}/masks_remaining" for i in range(3)]
    assert "sample_00002/denoising" in tags["images"]
    assert "sample_00003/denoising" not in tags["images"]


def test_step_text_shows_canvas_commits_and_alternatives(written):
    _, events, path = written
    sample = load_history(path).sample(0)
    texts = _text(events, "sample_00000/steps/text_summary")
    assert sorted(texts) == sample.steps.tolist()
    for s, step in enumerate(sample.steps.tolist()):
        text = texts[step]
        left = int(sample.masks_remaining[s])
        assert text.startswith(f"**step {step}**: 1 committed, {left} masks left")
        [j] = sample.committed[s].nonzero().flatten().tolist()
        token = TOKENIZER.id_to_token(int(sample.canvas[s, j]))
        canvas_line = text.split("\n")[2].split(" ")
        assert canvas_line[j] == f"**{escape_markdown(token)}**"
        assert canvas_line.count("\\_") == left
        alternatives = " · ".join(
            f"{escape_markdown(TOKENIZER.id_to_token(t))} {p:.3f}"
            for t, p in zip(sample.topk_ids[s, j].tolist(), sample.topk_probs[s, j].tolist()))
        confidence = float(sample.confidence_at_commit[j])
        row = f"| {2 + j} | {escape_markdown(token)} | {confidence:.3f} | {alternatives} |"
        assert row in text.split("\n")
    summary = _text(events, "sample_00000/summary/text_summary")[0]
    prompt = " ".join(TOKENIZER.id_to_token(i) for i in sample.prompt_ids.tolist())
    assert f"**prompt:** {prompt}" in summary and "**output:** row 0" in summary


def test_one_picture_per_step_and_a_png_next_to_the_file(written):
    _, events, path = written
    sample = load_history(path).sample(1)  # 2 steps x 4 positions
    pictures = events.Images("sample_00001/denoising")
    assert [e.step for e in pictures] == sample.steps.tolist()
    decoded = [np.asarray(Image.open(io.BytesIO(e.encoded_image_string)).convert("RGB")) for e in pictures]
    assert decoded[0].shape == decoded[1].shape and not np.array_equal(decoded[0], decoded[1])
    png = png_path(path, sample)
    assert png == path.parent / "history-00000.sample_00001.png"
    assert np.array_equal(np.asarray(Image.open(png).convert("RGB")), decoded[-1])
    scalars = events.Scalars("sample_00001/masks_remaining")
    assert [(e.step, e.value) for e in scalars] == [(0, 2.0), (1, 0.0)]


def test_markdown_escaping_shows_special_tokens_literally():
    # TensorBoard's Markdown prints "\<" as is, so angle brackets must be HTML entities.
    assert escape_markdown("<eos>") == "&lt;eos&gt;"
    assert escape_markdown("a*b_c") == "a\\*b\\_c"
    assert escape_markdown("x & y") == "x &amp; y"
