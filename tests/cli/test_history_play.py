"""`xdllm history play`: a sample's denoising step by step, coloured by confidence."""

import io
import math

import pytest
import torch
from rich.console import Console

from xdllm.cli.main import main
from xdllm.history.live import commit_probabilities, confidence_color, live_frames, play
from xdllm.history.reader import SampleHistory, iter_samples
from xdllm.history.render import output_text

MASK = 1


def _sample() -> SampleHistory:
    """Region of 3: step 0 commits position 1 ('b', p=0.9), step 1 commits 0 ('a', p=0.2) and 2
    ('c', not in the top-2); position 2's guess at step 0 is 'a'."""
    a, b, c = 5, 6, 7
    topk_ids = torch.tensor([[[b, a], [b, a], [a, b]],
                             [[a, b], [b, a], [b, a]]])
    topk_probs = torch.tensor([[[0.6, 0.4], [0.9, 0.1], [0.5, 0.3]],
                               [[0.2, 0.1], [0.9, 0.1], [0.6, 0.2]]])
    return SampleHistory(
        sample_id=3, output_start=2, steps=torch.tensor([0, 1]), topk_ids=topk_ids, topk_probs=topk_probs,
        canvas=torch.tensor([[MASK, b, MASK], [a, b, c]]),
        committed=torch.tensor([[False, True, False], [True, False, True]]),
        initial_canvas=torch.tensor([MASK, MASK, MASK]), commit_step=torch.tensor([1, 0, 1]),
        confidence_at_commit=torch.tensor([0.2, 0.9, 0.1]), prompt_ids=torch.tensor([2, 4]),
        target_ids=None, text="a b c", mask_token_id=MASK,
        vocab={2: "<bos>", 4: "x", a: "a", b: "b", c: "c"})


def test_the_header_counts_one_step_in_the_singular():
    """A sample of one step: ``sample 3: 1 step`` (it said ``1 steps``)."""
    two = _sample()
    one = SampleHistory(
        sample_id=3, output_start=2, steps=two.steps[:1], topk_ids=two.topk_ids[:1], topk_probs=two.topk_probs[:1],
        canvas=two.canvas[:1], committed=two.committed[:1], initial_canvas=two.initial_canvas,
        commit_step=torch.tensor([-1, 0, -1]), confidence_at_commit=torch.tensor([math.nan, 0.9, math.nan]),
        prompt_ids=two.prompt_ids, target_ids=None, text="b", mask_token_id=MASK, vocab=two.vocab)
    for sample, header in ((one, "sample 3: 1 step\n"), (two, "sample 3: 2 steps\n")):
        output = io.StringIO()
        play(sample, Console(file=output, width=100), delay=0)
        assert output.getvalue().startswith(header)


def test_commit_probabilities_follow_each_token_from_its_commit():
    p = commit_probabilities(_sample())
    assert math.isnan(p[0, 0]) and math.isnan(p[0, 2])  # still masked
    assert p[0, 1] == pytest.approx(0.9) and p[1, 1] == pytest.approx(0.9)  # kept from step 0
    assert p[1, 0] == pytest.approx(0.2)
    assert math.isnan(p[1, 2])  # 'c' is outside the recorded top-2


def test_colours_are_absolute():
    assert confidence_color(1.0).triplet == (0, 255, 60)
    assert confidence_color(0.5).triplet == (255, 255, 60)
    assert confidence_color(0.0).triplet == (255, 0, 60)


def test_frames_colour_commits_and_show_guesses_at_masks():
    first, second = live_frames(_sample())
    assert first.plain.splitlines()[1] == "b b a"  # masks show the top-1 guess
    styles = {first.plain[span.start:span.end]: span.style for span in first.spans}
    assert styles["b"].bold and styles["b"].underline  # committed at this step
    assert styles["b"].color.triplet == confidence_color(0.9).triplet
    guess = [span.style for span in first.spans if first.plain[span.start:span.end] == "a"]
    assert all(style.italic for style in guess)
    spans = {second.plain[span.start:span.end]: span.style for span in second.spans}
    assert spans["a"].color.triplet == confidence_color(0.2).triplet and spans["a"].bold
    assert not spans["b"].bold  # committed earlier
    plain = live_frames(_sample(), plain=True)
    assert [frame.plain.splitlines()[1] for frame in plain] == ["_ *b* _", "*a* b *c*"]


def test_play_on_a_colour_terminal_animates_and_ends_on_the_output():
    output = io.StringIO()
    console = Console(file=output, force_terminal=True, color_system="truecolor", width=100)
    play(_sample(), console, delay=0.001)
    text = output.getvalue()
    assert "\x1b[1;4;38;2;255;102;60ma" in text  # 'a' committed at p=0.2: red-orange, bold, underlined
    assert "\x1b[38;2;51;255;60mb" in text  # 'b' kept from p=0.9: green, plain weight
    assert text.rstrip().endswith("output: a b c")


def test_history_play_on_a_recorded_generation(trained_run, capsys):
    (folder,) = trained_run.glob("generate/*/history")
    sample = next(iter(iter_samples(folder)))
    assert main(["history", "play", str(folder), "--sample", "0"]) == 0
    out = capsys.readouterr().out  # captured: not a terminal, so every step is printed plainly
    assert "\r" not in out and "\x1b[" not in out
    frames = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(frames) == sample.num_steps
    lines = out.splitlines()
    first_canvas, last_canvas = lines[lines.index(frames[0]) + 1], lines[lines.index(frames[-1]) + 1]
    assert first_canvas.count("_") == sample.masked[0].sum() and "_" not in last_canvas.split()
    assert out.rstrip().endswith(f"output: {output_text(sample.text)}")  # an empty output (all EOS): (empty)


def test_history_play_out_of_range_is_one_line(trained_run, capsys):
    (folder,) = trained_run.glob("generate/*/history")
    assert main(["history", "play", str(folder), "--sample", "999"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "out of range" in err[0]


def _first_record(out_dir):
    import json

    records = [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]
    return next(record for record in records if record["sample_index"] == 0)


@pytest.mark.slow
def test_live_generation_draws_the_first_sample_as_it_denoises(trained_run, tmp_path, capsys):
    out_dir = tmp_path / "gen"
    assert main(["generate", f"ckpt={trained_run}", "live=true", "history=topk", "num_samples=4",
                 f"output_dir={out_dir}"]) == 0
    err = capsys.readouterr().err  # not a terminal: every step printed in turn, no colour
    record = _first_record(out_dir)
    frames = [line for line in err.splitlines() if line.startswith("step ")]
    assert len(frames) == record["steps_taken"]
    assert [frame.split(", ")[0] for frame in frames] == [  # it said '(1 run)'
        f"step {step} (forward pass {step + 1})" for step in range(len(frames))]
    lines = err.splitlines()
    last = lines[lines.index(frames[-1]) + 1]
    assert "_" not in last.split() and f"output: {record['text']}" in err
    assert list((out_dir / "history").glob("history-*.pt"))  # the wrapped recorder still records


@pytest.mark.slow
def test_live_generation_on_a_terminal_uses_colour(trained_run, tmp_path, monkeypatch):
    screen = io.StringIO()
    monkeypatch.setattr("xdllm.run.generate.Console", lambda stderr: Console(
        file=screen, force_terminal=True, color_system="truecolor", width=100))
    out_dir = tmp_path / "gen"
    assert main(["generate", f"ckpt={trained_run}", "live=true", "num_samples=2", f"output_dir={out_dir}"]) == 0
    text = screen.getvalue()
    assert "\x1b[" in text and "38;2;" in text  # truecolour confidence colours
    assert text.rstrip().endswith(f"output: {output_text(_first_record(out_dir)['text'])}")
