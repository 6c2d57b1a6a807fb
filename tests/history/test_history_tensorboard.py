"""write_tensorboard, read back with TensorBoard's own event reader."""

from __future__ import annotations

import io

import numpy as np
import pytest
from history_fakes import fake_generate
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.history import HistoryTopKPlugin, load_history, write_tensorboard
from xdllm.history.tensorboard import TextOptions, escape_markdown, png_path

TOKENIZER = SymbolTokenizer(list("abcdefgh"))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("written")
    recorder = HistoryTopKPlugin(k=3, output_dir=tmp_path / "run" / "history", tokenizer=TOKENIZER,
                                 split="test")
    fake_generate(recorder, prompt_lens=[2, 3], gen_len=4, commits_per_step=[1, 2], seed=1)
    fake_generate(recorder, prompt_lens=[2, 2], gen_len=4, commits_per_step=[3, 3], seed=2)
    count = write_tensorboard(tmp_path / "run", tmp_path / "tb", max_samples=3, max_frames=3).written
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
    assert sorted(tags["scalars"]) == ["test/forward_passes_per_sample", *(
        f"test/tokens_committed_per_step/{name}" for name in ("max", "mean", "min", "std"))]
    assert "test/sample_00002/denoising" in tags["images"]
    assert "test/sample_00003/denoising" not in tags["images"]
    # sample 0 ran 5 steps: two steps per card, one entry per card, cards sort in step order
    cards = sorted(t for t in tags["tensors"] if t.startswith("test/sample_00000/"))
    assert cards == [f"test/sample_00000/{name}/text_summary"
                     for name in ("overview", "steps_0-1", "steps_2-3", "steps_4-4")]
    assert all(len(events.Tensors(tag)) == 1 for tag in cards)


def test_step_cards_read_in_order_with_topk_of_masked_positions(written):
    _, events, path = written
    sample = load_history(path).sample(0)  # 5 output positions, one commit per step
    name = TOKENIZER.id_to_token
    text = "\n\n".join(_text(events, f"test/sample_00000/{card}/text_summary")[first]
                        for card, first in (("steps_0-1", 0), ("steps_2-3", 2), ("steps_4-4", 4)))
    blocks = [block.split("\n") for block in text.split("\n\n**step ")]
    assert len(blocks) == 5
    wrong = sample.wrong

    def short(p: float) -> str:
        return f"{p:.2f}".removeprefix("0")

    for s, lines in enumerate(blocks):
        header, canvas = lines[0].removeprefix("**step ").split("<br>")
        assert header == f"{s}** ({s + 1} of 5) · 1 committed · {4 - s} masked · {int(wrong[s].sum())} wrong"
        [j] = sample.committed[s].nonzero().flatten().tolist()
        token = escape_markdown(name(int(sample.canvas[s, j])))
        mark = "✗" if wrong[s, j] else ""
        assert canvas.split(" ")[j] == f"**{token}{mark}**"
        assert canvas.count("\\_") == 4 - s
        listed = sorted([j] + sample.masked[s].nonzero().flatten().tolist())  # relative positions
        assert lines[2] == "| pos | " + " | ".join(map(str, listed)) + " |"
        tokens = lines[4].removeprefix("| **token** | ").removesuffix(" |").split(" | ")
        confidence = short(float(sample.confidence_at_commit[j]))
        assert tokens == [f"**{token}**{mark}\u00a0{confidence}" if n == j else "\\_" for n in listed]
        topk = lines[5].removeprefix("| **top-k** | ").removesuffix(" |").split(" | ")
        assert topk == ["<br>".join(
            f"{escape_markdown(name(t))}\u00a0{short(p)}"
            for t, p in zip(sample.topk_ids[s, n].tolist(), sample.topk_probs[s, n].tolist()))
            for n in listed]


def test_masked_positions_are_capped_and_the_rest_counted(tmp_path, generate):
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "history", tokenizer=TOKENIZER)
    generate(recorder, prompt_lens=[1], gen_len=6, commits_per_step=[6], seed=0)
    write_tensorboard(tmp_path, tmp_path / "tb", max_frames=1, text=TextOptions(masked_positions=0))
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0})
    events.Reload()
    # no split recorded, not a validation folder: "generation"
    [card] = _text(events, "generation/sample_00000/steps_0-0/text_summary").values()
    assert "| pos | 0 | 1 | 2 | 3 | 4 | 5 |" in card  # all committed at step 0, none masked

    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "run" / "history" / "val-step0000010",
                                 tokenizer=TOKENIZER)
    generate(recorder, prompt_lens=[1], gen_len=6, commits_per_step=[1], seed=0)
    write_tensorboard(tmp_path / "run", tmp_path / "tb2", max_frames=1, text=TextOptions(masked_positions=2))
    events = EventAccumulator(str(tmp_path / "tb2"), size_guidance={"tensors": 0})
    events.Reload()
    card = _text(events, "validation/sample_00000/steps_0-1/text_summary")[0]
    first_step = card.split("\n\n**step 1**")[0]
    assert "| pos | 0 | 1 | 2 |" in first_step  # masked 0 and 1, committed 2
    assert "*... and 3 more masked positions not shown (top-k of the first 2 only)*" in first_step


def test_scalars_cover_every_sample_not_only_the_rendered_ones(written):
    _, events, path = written
    samples = [s for file in sorted(path.parent.glob("history-*.pt")) for s in load_history(file)]
    assert len(samples) == 4  # one more than rendered
    per_step: dict[int, list[int]] = {}
    for sample in samples:
        for step, count in zip(sample.steps.tolist(), sample.tokens_committed.tolist()):
            per_step.setdefault(step, []).append(count)
    for name, reduce in (("mean", lambda v: np.mean(v)), ("std", lambda v: np.std(v)),
                         ("min", min), ("max", max)):
        logged = [(e.step, e.value) for e in events.Scalars(f"test/tokens_committed_per_step/{name}")]
        assert logged == [(step, pytest.approx(reduce(values), abs=1e-6)) for step, values in sorted(per_step.items())]
    passes = [(e.step, e.value) for e in events.Scalars("test/forward_passes_per_sample")]
    assert passes == [(s.sample_id, s.num_steps) for s in samples] == [(0, 5), (1, 2), (2, 2), (3, 2)]


def test_overview_card(written):
    _, events, path = written
    sample = load_history(path).sample(0)
    name = TOKENIZER.id_to_token
    overview = _text(events, "test/sample_00000/overview/text_summary")[0]
    lines = overview.split("\n")
    assert lines[0] == "**sample 0** (test) · 5 steps = 5 forward passes · 5 output positions · top-3 recorded"
    prompt = " ".join(escape_markdown(name(i)) for i in sample.prompt_ids.tolist())
    assert f"| **prompt** | {prompt} |" in lines
    target = " ".join(escape_markdown(name(i)) for i in sample.target_ids.tolist())
    assert f"| **target** | {target} |" in lines
    wrong = sample.wrong[-1].tolist()
    output = " ".join(escape_markdown(name(t)) + ("✗" if w else "")
                      for t, w in zip(sample.canvas[-1].tolist(), wrong))
    assert f"| **output** | {output} |" in lines
    right = 4 - sum(wrong)
    assert f"**result:** {right} of 4 target tokens right ({sum(wrong)} wrong, marked ✗)" in lines
    assert "**decoded output:** row 0" in lines


def test_one_picture_per_step_and_a_png_next_to_the_file(written):
    _, events, path = written
    sample = load_history(path).sample(1)  # 2 steps x 4 positions
    pictures = events.Images("test/sample_00001/denoising")
    assert [e.step for e in pictures] == sample.steps.tolist()
    decoded = [np.asarray(Image.open(io.BytesIO(e.encoded_image_string)).convert("RGB")) for e in pictures]
    assert decoded[0].shape == decoded[1].shape and not np.array_equal(decoded[0], decoded[1])
    png = png_path(path, sample)
    assert png == path.parent / "history-00000.sample_00001.png"
    assert np.array_equal(np.asarray(Image.open(png).convert("RGB")), decoded[-1])


def test_markdown_escaping_shows_special_tokens_literally():
    # TensorBoard's Markdown prints "\<" as is, so angle brackets must be HTML entities.
    assert escape_markdown("<eos>") == "&lt;eos&gt;"
    assert escape_markdown("a*b_c") == "a\\*b\\_c"
    assert escape_markdown("x & y") == "x &amp; y"
