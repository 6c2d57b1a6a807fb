"""The step x position denoising picture: cell colours, labels, frames, wrong marks, pixels."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch
from history_fakes import fake_generate
from matplotlib import colormaps
from matplotlib.colors import to_rgba
from PIL import Image

from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.history import HistoryTopKPlugin, load_history
from xdllm.history.figures import (
    CONFIDENCE_COLORMAP,
    EARLIER_COLOR,
    GIVEN_COLOR,
    MASKED_COLOR,
    NOT_YET_COLOR,
    WRONG_COLOR,
    DenoisingFigure,
)
from xdllm.history.tensorboard import frame_rows

TOKENIZER = SymbolTokenizer(list("abcdefgh"))


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """3 prompt tokens, 4 output positions, one commit per step: 4 steps."""
    directory = tmp_path_factory.mktemp("history")
    recorder = HistoryTopKPlugin(k=2, output_dir=directory, tokenizer=TOKENIZER)
    fake_generate(recorder, prompt_lens=[3], gen_len=4, commits_per_step=[1], seed=3)
    return load_history(recorder.files_written[0]).sample(0)


@pytest.fixture(scope="module")
def figure(sample):
    return DenoisingFigure(sample, prompt_columns=2)


def test_cell_colours_use_an_absolute_confidence_scale(sample, figure):
    colors = figure.colors
    assert colors.shape == (4, 2 + 4, 4)
    assert (colors[:, :2] == to_rgba(GIVEN_COLOR)).all()  # the prompt columns
    output = colors[:, 2:]
    viridis = colormaps[CONFIDENCE_COLORMAP]
    for row, step in enumerate(sample.steps.tolist()):
        for j in range(4):
            commit = int(sample.commit_step[j])
            if commit == step:
                expected = viridis(float(sample.confidence_at_commit[j]))
            elif commit < step:
                expected = to_rgba(EARLIER_COLOR)
            else:
                expected = to_rgba(MASKED_COLOR)
            assert tuple(output[row, j]) == pytest.approx(expected), (row, j)


def test_labels_say_what_the_picture_shows(sample, figure):
    axes = figure.axes
    assert axes.get_ylabel() == "denoising step"
    assert axes.get_xlabel().startswith("position relative to the output start (0 = first output token")
    assert "the prompt (its last 2 of 3 tokens)" in axes.get_xlabel()
    assert [t.get_text() for t in axes.get_xticklabels()] == ["-2", "-1", "0", "1", "2", "3"]
    assert [t.get_text() for t in axes.get_yticklabels()] == [str(s) for s in sample.steps.tolist()]
    [colorbar] = [a for a in figure.figure.axes if a.get_ylabel().startswith("confidence at commit")]
    assert colorbar.get_ylim() == (0.0, 1.0)
    [legend] = figure.figure.legends
    assert {t.get_text() for t in legend.get_texts()} >= {"masked", "committed at an earlier step"}


def _cell_pixel(figure, pixels, column: int, row: int) -> np.ndarray:
    """A pixel inside a cell, away from its centred token text."""
    x, y = figure.axes.transData.transform((column - 0.4, row - 0.35))
    return pixels[pixels.shape[0] - int(round(y)), int(round(x))].astype(int)


def _rgb(color) -> np.ndarray:
    return np.round(np.array(to_rgba(color)[:3]) * 255).astype(int)


def test_render_blanks_later_rows_and_names_the_step(sample, figure):
    pixels = figure.render(1)
    for row in range(4):
        for column in range(6):
            cell = _cell_pixel(figure, pixels, column, row)
            expected = _rgb(NOT_YET_COLOR) if row > 1 else np.round(figure.colors[row, column, :3] * 255)
            assert np.abs(cell - expected).max() <= 2, (row, column, cell, expected)
    step = int(sample.steps[1])
    assert figure.title.get_text().startswith(
        f"sample {sample.sample_id}: the canvas after step {step} (2 of 4 steps)\n1 committed at this "
        f"step, 2 still masked")
    with pytest.raises(IndexError, match="row 4 out of range"):
        figure.render(4)


def test_a_notebook_shows_a_figure_as_its_complete_picture(figure):
    """A notebook printed '<xdllm.history.figures.DenoisingFigure object at 0x...>'."""
    shown = Image.open(io.BytesIO(figure._repr_png_()))
    assert np.array_equal(np.asarray(shown), figure.render(figure.num_steps - 1))


def test_rendering_only_the_changes_matches_a_full_redraw(sample):
    figure = DenoisingFigure(sample, prompt_columns=2)
    quick = figure.render(2)
    for artist in figure._changing:  # now draw everything the ordinary way
        artist.set_animated(False)
    figure.canvas.draw()
    full = np.asarray(figure.canvas.buffer_rgba())[..., :3].astype(int)
    differing = np.abs(quick.astype(int) - full).max(axis=2) > 8
    assert differing.sum() == 0, differing.sum()  # the same pixels


def test_wrong_tokens_are_framed_at_their_commit_and_red_after(sample, figure):
    wrong = sample.wrong
    assert wrong is not None and wrong.any()  # random targets: some outputs are wrong
    frames = [p for p in figure.axes.patches if to_rgba(p.get_edgecolor()) == to_rgba(WRONG_COLOR)]
    assert len(frames) == int((wrong & sample.committed).sum())
    red = [label.text for label in figure.cell_labels.labels if label.color == WRONG_COLOR]
    assert len(red) == int((wrong & ~sample.committed).sum())  # framed at the commit, red after


def test_png_is_the_complete_picture(sample, figure, tmp_path):
    path = tmp_path / "picture.png"
    figure.save_png(path)
    pixels = np.asarray(Image.open(path).convert("RGB"))
    assert np.array_equal(pixels, figure.render(3))
    j = int(sample.confidence_at_commit.argmax())
    row = int((sample.steps == sample.commit_step[j]).nonzero())
    expected = np.round(np.array(colormaps[CONFIDENCE_COLORMAP](float(sample.confidence_at_commit[j]))[:3]) * 255)
    assert np.abs(_cell_pixel(figure, pixels, 2 + j, row) - expected).max() <= 2


def test_unknown_target_marks_nothing_wrong(sample):
    from dataclasses import replace

    no_target = replace(sample, target_ids=None)
    assert no_target.wrong is None
    figure = DenoisingFigure(no_target)
    assert not [p for p in figure.axes.patches if to_rgba(p.get_edgecolor()) == to_rgba(WRONG_COLOR)]
    assert "wrong vs target" not in figure.axes.get_title(loc="left")


def test_reference_length_stops_at_eos(sample):
    from dataclasses import replace

    target = torch.tensor([5, TOKENIZER.eos_token_id, 0, 0])
    ended = replace(sample, target_ids=target)
    assert ended.reference_length == 2
    assert not ended.wrong[:, 2:].any()  # positions after the reference's EOS are not scored


@pytest.mark.parametrize(("steps", "frames", "rows"), [
    (3, 5, [0, 1, 2]), (10, 4, [0, 3, 6, 9]), (10, 1, [9]), (5, 2, [0, 4])])
def test_frame_rows(steps, frames, rows):
    assert frame_rows(steps, frames) == rows


def test_tokens_that_print_nothing_are_drawn_as_escapes(sample):
    # byte-level BPE decodes a lone byte token to a control character, which no font draws
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "Glyph 22 missing from font(s)"
        figure = DenoisingFigure(sample, token_text=lambda token: "\x16" if token % 2 else "\u200b")
        figure.render(3)
    labels = {label.text for label in figure.cell_labels.labels}
    assert {"\\x16", "\\u200b"} <= labels and not any("\x16" in label for label in labels)
