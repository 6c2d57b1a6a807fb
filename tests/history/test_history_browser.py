"""TensorBoard, launched on the written logs and loaded in headless Chromium, shows the views.

Each dashboard is opened in the browser and checked through its live DOM (walking the shadow
roots over the DevTools protocol): the denoising pictures (the slider has one position per
step, every position shows that step's picture, whose axis labels and colour bar are where the
figure puts them), the text cards (in step order, one entry each, no inner scrolling for a
small sample) and the scalar charts. Screenshots of each view are kept in
``test-artifacts/history-browser/`` (override with ``$XDLLM_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import io
import json
import os
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
from history_devtools import CHROMIUM, FIND_ALL, chromium_page, get_bytes, tensorboard_server
from history_fakes import fake_generate
from matplotlib import colormaps
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.history import HistoryTopKPlugin, load_history, write_tensorboard
from xdllm.history.figures import CONFIDENCE_COLORMAP, DenoisingFigure

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("XDLLM_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "history-browser"
TAG = "test/sample_00000/denoising"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"needs {CHROMIUM} "
                       "(apt-get install -y chromium; make browser-deps)"),
]

# The image loader of TAG: slider range, the step shown, and its picture.
IMAGE_CARD = FIND_ALL + """(() => {
  const card = findAll('tf-image-loader').find((el) => el.tag === '%s');
  if (!card) return null;
  const img = card.shadowRoot.querySelector('#main-image-container img');
  const slider = card.shadowRoot.querySelector('paper-slider#steps');
  return {max: card._maxStepIndex, index: card._stepIndex, step: card._stepValue,
          slider_max: slider ? slider.max : null,
          src: img ? img.src : null, loaded: !!(img && img.complete && img.naturalWidth),
          width: img ? img.naturalWidth : 0, height: img ? img.naturalHeight : 0};
})()""" % TAG

# Text cards in page order: tag, entries, and whether the card's box scrolls.
TEXT_CARDS = FIND_ALL + """findAll('tf-text-loader').map((card) => {
  const box = card.shadowRoot.querySelector('#steps-container');
  const views = box ? [...box.querySelectorAll('tf-markdown-view')].map((v) => v.shadowRoot) : [];
  return {tag: card.tag, entries: (card._texts || []).length,
          text: views.map((v) => v.textContent).join(' ').replace(/\\s+/g, ' '),
          // TensorBoard wraps each entry in a one-cell table: count the tables inside it
          tables: views.map((v) => [...v.querySelectorAll('td table')].length).reduce((a, b) => a + b, 0),
          scrolls: box ? box.scrollHeight > box.clientHeight + 1 : null,
          height: box ? box.scrollHeight : 0};
})"""

# Scalar cards: tag, and how many plotted points and drawn line paths each chart has.
SCALAR_CARDS = FIND_ALL + """findAll('tf-scalar-card').map((card) => ({
  tag: card.tag,
  lines: findAll('path', card).filter((p) => (p.getAttribute('class') || '').includes('line')
                                            && (p.getAttribute('d') || '').length > 0).length,
  axis_labels: findAll('text', card).length}))"""


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """One test sample: 3 prompt tokens, 4 output positions, one commit per step (4 steps)."""
    root = tmp_path_factory.mktemp("browser")
    recorder = HistoryTopKPlugin(k=3, output_dir=root / "run" / "history", split="test",
                                 tokenizer=SymbolTokenizer(list("abcdefgh")))
    fake_generate(recorder, prompt_lens=[3], gen_len=4, commits_per_step=[1], seed=5)
    write_tensorboard(root / "run", root / "tb", max_frames=4)
    events = EventAccumulator(str(root / "tb"), size_guidance={"images": 0})
    events.Reload()
    pictures = {e.step: e.encoded_image_string for e in events.Images(TAG)}
    sample = load_history(recorder.files_written[0]).sample(0)
    return root, sample, pictures


@pytest.fixture(scope="module")
def server(logs):
    with tensorboard_server(logs[0] / "tb") as url:
        yield url


@pytest.fixture
def page(tmp_path):
    with chromium_page(tmp_path / "chromium-profile") as page:
        yield page


def test_denoising_pictures_replay_on_the_step_slider(logs, server, page):
    _, sample, pictures = logs
    steps = sample.steps.tolist()
    page.navigate(f"{server}/#images")
    card = page.wait_for(lambda c: c["loaded"], IMAGE_CARD)
    assert card is not None and card["loaded"], card
    assert card["max"] == card["slider_max"] == len(steps) - 1  # one slider position per step
    figure = DenoisingFigure(sample)
    assert (card["width"], card["height"]) == figure.figure.canvas.get_width_height()
    page.screenshot(ARTIFACTS / "images.png")
    assert card["step"] == steps[-1]
    for index, step in enumerate(steps):  # move the slider from the first step to the last
        shown_before = card["src"]
        page.evaluate(FIND_ALL + f"findAll('tf-image-loader').find((el) => el.tag === '{TAG}')"
                                 f"._stepIndex = {index}")
        card = page.wait_for(lambda c, step=step, before=shown_before: (
            c["step"] == step and c["loaded"] and (c["src"] != before or step == steps[-1])), IMAGE_CARD)
        assert card["step"] == step, card
        shown = get_bytes(card["src"])
        assert shown == pictures[step]  # the browser shows this step's picture
    _check_axes_and_colour_bar(figure, np.asarray(Image.open(io.BytesIO(shown)).convert("RGB")))


def _check_axes_and_colour_bar(figure: DenoisingFigure, pixels: np.ndarray) -> None:
    """The picture's axis labels hold dark text and its colour bar runs from viridis(0) at the
    bottom to viridis(1) at the top, at the places the figure lays them out."""
    height = pixels.shape[0]

    def region(extent) -> np.ndarray:
        x0, y0, x1, y1 = (int(round(v)) for v in extent.extents)
        return pixels[height - y1:height - y0, x0:x1]

    axes = figure.axes
    for label in (axes.xaxis.label, axes.yaxis.label):
        assert (region(label.get_window_extent()).min(axis=2) < 100).any(), label.get_text()
    [colorbar] = [a for a in figure.figure.axes if a.get_ylabel().startswith("confidence at commit")]
    box = colorbar.get_window_extent()
    x = int(round((box.x0 + box.x1) / 2))
    viridis = colormaps[CONFIDENCE_COLORMAP]
    for fraction in (0.02, 0.5, 0.98):  # near the bottom, the middle, near the top
        y = height - int(round(box.y0 + fraction * box.height))
        expected = np.round(np.array(viridis(fraction)[:3]) * 255)
        assert np.abs(pixels[y, x].astype(int) - expected).max() <= 12, (fraction, pixels[y, x])


def test_text_cards_read_in_step_order(logs, server, page):
    _, sample, _ = logs
    page.navigate(f"{server}/#text", height=1800)
    cards = page.wait_for(lambda cards: len(cards) == 3 and all(c["text"] for c in cards), TEXT_CARDS)
    assert [c["tag"] for c in cards] == [f"test/sample_00000/{name}/text_summary"
                                         for name in ("overview", "steps_0-1", "steps_2-3")]
    assert all(c["entries"] == 1 and c["scrolls"] is False for c in cards), cards
    overview, first, second = (c["text"] for c in cards)
    for word in ("prompt", "target", "output", "result:", "4 steps = 4 forward passes"):
        assert word in overview
    assert first.index("step 0 (1 of 4)") < first.index("step 1 (2 of 4)")
    assert "step 2 (3 of 4)" in second and "step 3 (4 of 4)" in second
    assert "top-k" in first and "pos" in first
    assert [c["tables"] for c in cards] == [1, 2, 2]  # the overview's, then one per step
    page.screenshot(ARTIFACTS / "text.png")


def test_scalar_charts_list_the_denoising_statistics(server, page):
    page.navigate(f"{server}/#scalars", height=1200)
    cards = page.wait_for(lambda cards: len(cards) >= 5 and all(c["lines"] and c["axis_labels"] for c in cards),
                          SCALAR_CARDS)
    assert all(c["lines"] and c["axis_labels"] for c in cards), cards  # every chart is drawn
    tags = sorted(c["tag"] for c in cards)
    assert tags == ["test/forward_passes_per_sample", *(
        f"test/tokens_committed_per_step/{name}" for name in ("max", "mean", "min", "std"))]
    data = json.loads(get_bytes(f"{server}/data/plugin/scalars/scalars?run=.&tag="
                                + urllib.parse.quote("test/tokens_committed_per_step/mean", safe="")))
    assert [(step, value) for _, step, value in data] == [(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0)]
    page.screenshot(ARTIFACTS / "scalars.png")
