"""step_views: ascending steps, relative positions, top-k of masked positions, the cap."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.history import HistoryError, HistoryTopKPlugin, load_history
from xdllm.history.render import step_views
from xdllm.history.show import format_replay
from xdllm.history.tensorboard import cell_markdown

TOKENIZER = SymbolTokenizer(list("abcdefgh"))


@pytest.fixture
def sample(tmp_path, generate):
    recorder = HistoryTopKPlugin(k=3, output_dir=tmp_path, tokenizer=TOKENIZER)
    generate(recorder, prompt_lens=[4, 2], gen_len=3, commits_per_step=[2, 2], seed=4)
    return load_history(recorder.files_written[0]).sample(0)  # output starts at canvas position 4


def test_positions_are_relative_and_masked_ones_carry_their_topk(sample):
    views = step_views(sample, masked_positions=None)
    assert [v.step for v in views] == sorted(sample.steps.tolist())
    first = views[0]
    assert [p.position for p in first.positions] == list(range(sample.canvas.shape[1]))
    for position in first.positions:
        j = position.position
        assert position.state == ("committed" if sample.committed[0, j] else "masked")
        assert [a for a, _ in position.alternatives] == [
            TOKENIZER.id_to_token(t) for t in sample.topk_ids[0, j].tolist()]
        assert math.isnan(position.confidence) == (position.state == "masked")
        assert position.wrong == bool(sample.wrong[0, j])
    assert first.hidden_masked == 0 and first.masks_remaining == int(sample.masks_remaining[0])


def test_cap_lists_the_first_masked_positions_and_counts_the_rest(sample):
    [first, *_] = step_views(sample, masked_positions=0)
    assert all(p.state == "committed" for p in first.positions)
    assert first.hidden_masked == first.masks_remaining == int(sample.masks_remaining[0]) > 0
    with pytest.raises(HistoryError, match="masked_positions must be >= 0"):
        step_views(sample, masked_positions=-1)


def test_padding_after_an_eos_is_not_shown_as_a_commit(sample):
    """A block-wise predictor (hybrid) pads the rest of a finished block after its EOS and records
    the padding as committed with no prediction behind it (every probability 0): it read as
    `<pad> committed, conf 0.000: <pad> 0.000 <pad> 0.000 ...` at every padded position."""
    last = sample.num_steps - 1
    [j] = sample.committed[last].nonzero().flatten().tolist()[-1:]
    canvas, probs = sample.canvas.clone(), sample.topk_probs.clone()
    canvas[last, j], probs[last, j] = TOKENIZER.pad_token_id, 0.0
    padded = dataclasses.replace(sample, canvas=canvas, topk_probs=probs, pad_token_id=TOKENIZER.pad_token_id)
    before, after = step_views(sample)[last], step_views(padded)[last]
    assert after.cells[j].state == "fixed" and before.cells[j].state == "committed"
    assert after.committed == before.committed - 1
    assert j not in [p.position for p in after.positions]


def test_an_underscore_token_is_not_shown_as_a_mask(sample):
    """A text tokenizer's ``_`` token (common in code) read as the views' mask placeholder ``_`` in
    ``history show``, ``play`` and the TensorBoard cards."""
    last = sample.num_steps - 1
    token = int(sample.canvas[last, 0])

    def text(t: int) -> str:
        return "_" if t == token else TOKENIZER.id_to_token(t)

    view = step_views(sample, token_text=text)[last]
    underscore = [cell for cell, t in zip(view.cells, sample.canvas[last].tolist()) if t == token]
    assert underscore and all(cell.text == "'_'" for cell in underscore)
    canvas_line = format_replay(sample, step=int(sample.steps[last]), token_text=text).split("\n")[-1 - len(
        view.positions) - bool(view.hidden_masked)]
    assert canvas_line.split().count("_") == view.masks_remaining  # only the masked positions read "_"
    assert cell_markdown(underscore[0]).strip("*") != cell_markdown(dataclasses.replace(underscore[0], state="masked"))


def test_a_sample_that_sat_out_a_step_lists_its_steps_with_the_gap(sample):
    """A block predictor's row idles while others of its batch run a step (udlm: steps 0, 1, 3,
    4, 5); the header said '(0..5)' and `--step 2` answered 'has no step 2 (steps: 0..5)'."""
    assert sample.num_steps == 2
    gapped = dataclasses.replace(sample, steps=torch.tensor([0, 2]))
    assert f"sample {sample.sample_id}: 2 steps (0, 2) = 2 forward passes;" in format_replay(gapped)
    with pytest.raises(HistoryError, match=r"has no step 1 \(steps: 0, 2\)"):
        format_replay(gapped, step=1)
