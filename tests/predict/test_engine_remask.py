"""Remasking (Mask-Predict): a step takes back the block's earlier tokens that score below its
new candidates, and the block still ends every step with the masks the schedule leaves."""

import pytest
import torch
from matplotlib import colormaps
from matplotlib.colors import to_rgba
from predict_fakes import (
    MASK,
    BagOfTokensModel,
    LetterTokenizer,
    RecordingHistory,
    SecondThoughtsModel,
    letter,
    prompt_batch,
)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from xdllm.history import HistoryTopKPlugin, load_history, write_tensorboard
from xdllm.history.figures import CONFIDENCE_COLORMAP, TAKEN_BACK_COLOR, UNKNOWN_CONFIDENCE_COLOR, _cell_colors
from xdllm.history.format import payload_checksums
from xdllm.history.render import step_views
from xdllm.history.revisions import count_revisions
from xdllm.history.show import format_replay
from xdllm.history.tensorboard import overview_markdown, step_markdown
from xdllm.predict import UnmaskingPredictor
from xdllm_models.mdlm.predictor import MDLMPredictor


def _decode(model, batch=None, history=None, **options):
    history = history or RecordingHistory()
    predictor = UnmaskingPredictor(max_new_tokens=3, tokenizer=LetterTokenizer(), confidence="top_prob",
                                   **options)
    prediction = predictor.predict(batch or prompt_batch([[letter("a")]]), model=model, history=history)
    return prediction, history


def test_a_token_outscored_by_later_candidates_is_masked_again_and_rewritten():
    plain, plain_history = _decode(SecondThoughtsModel(), max_steps=3)
    assert plain["text"] == ["ace"] and plain_history.commit_order(0) == [[2], [3], [4]]

    revised, history = _decode(SecondThoughtsModel(), max_steps=3, remask=True)
    assert history.commit_order(0) == [[2], [3, 4], [2]]
    assert [state.canvas[0, 2:].tolist() for state in history.steps] == [
        [letter("a"), MASK, MASK], [MASK, letter("c"), letter("e")], [letter("b"), letter("c"), letter("e")]]
    assert revised["text"] == ["bce"] and revised["steps_taken"] == [3]


def _masks_after_each_step(history):
    return [int((state.canvas == MASK).sum()) for state in history.steps]


def _changed_columns(history, start):
    before = start
    for state in history.steps:
        yield (state.canvas[0] != before[0]).nonzero().flatten().tolist()
        before = state.canvas


# Each setting gives some step of a block that is neither its first (nothing written yet) nor
# its last (which commits everything left), where a token can be taken back.
SCHEDULES = [
    dict(max_steps=3), dict(max_steps=6), dict(max_steps=8, block_size=3), dict(max_steps=8, block_size=4),
    dict(max_steps=4, noise_schedule="cosine"), dict(max_steps=8, confidence="prob_diff", block_size=4),
    dict(max_steps=4, confidence="entropy"), dict(max_steps=6, confidence=None, temperature=1.0),
]


@pytest.mark.parametrize("options", SCHEDULES, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_remasking_keeps_the_schedule_and_the_current_block(options):
    options = {"confidence": "top_prob", **options}
    remasked_somewhere = 0
    for seed in range(8):
        model = BagOfTokensModel(seed)
        batch = prompt_batch([[letter("a"), letter("b")]])
        predictor = UnmaskingPredictor(max_new_tokens=8, tokenizer=LetterTokenizer(), seed=seed, **options)
        plain_history, history = RecordingHistory(), RecordingHistory()
        predictor.predict(batch, model=model, history=plain_history)
        predictor.remask = True
        prediction = predictor.predict(batch, model=model, history=history)
        assert _masks_after_each_step(history) == _masks_after_each_step(plain_history)
        assert prediction["steps_taken"] == [len(history.steps)] and len(history.steps) <= options["max_steps"]
        assert not (prediction["ids"] == MASK).any()
        block = options.get("block_size") or 8
        for state, columns in zip(history.steps, _changed_columns(history, history.begun[0])):
            assert len({(column - 3) // block for column in columns}) == 1  # every write in one block
            remasked_somewhere += sum(int(state.canvas[0, c] == MASK) for c in columns)
    assert remasked_somewhere > 0  # the property above was tested on runs that did remask


def test_a_threshold_still_commits_everything_above_it_and_finishes_in_time():
    for seed in range(6):
        history = RecordingHistory()
        predictor = UnmaskingPredictor(max_steps=4, max_new_tokens=8, tokenizer=LetterTokenizer(),
                                       confidence="top_prob", threshold=0.3, remask=True)
        prediction = predictor.predict(prompt_batch([[letter("c")]]), model=BagOfTokensModel(seed), history=history)
        assert prediction["steps_taken"][0] == len(history.steps) <= 4
        assert not (prediction["ids"] == MASK).any()
        before = history.begun[0][0]
        for state in history.steps:
            region = slice(int(state.output_start[0]), int(state.output_start[0]) + 8)
            above = (before[region] == MASK) & (state.confidence[0] >= 0.3)
            assert not (above & (state.canvas[0, region] == MASK)).any()
            before = state.canvas[0]


def test_a_sample_does_not_depend_on_its_batch_row_or_padding():
    prompts = [[letter("a")], [letter("b"), letter("c"), letter("d")], []]
    predictor = UnmaskingPredictor(max_steps=4, max_new_tokens=6, tokenizer=LetterTokenizer(), seed=3,
                                   temperature=0.8, confidence="prob_diff", block_size=3, remask=True)
    model = BagOfTokensModel(1)

    def outputs(prediction):
        return [prediction["ids"][row, start:start + 6].tolist()
                for row, start in enumerate(prediction["output_start_idx"].tolist())]

    indices = torch.tensor([10, 11, 12])
    together = outputs(predictor.predict(prompt_batch(prompts, "left", sample_index=indices), model=model))
    right = outputs(predictor.predict(prompt_batch(prompts, "right", sample_index=indices), model=model))
    alone = [outputs(predictor.predict(prompt_batch([p], sample_index=indices[i:i + 1]), model=model))[0]
             for i, p in enumerate(prompts)]
    assert together == right == alone


def test_infilling_never_remasks_the_given_tokens():
    ids = torch.tensor([[2, letter("a"), MASK, letter("b"), MASK, MASK, letter("c"), MASK]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids, dtype=torch.bool)}
    given = ids != MASK
    for seed in range(6):
        history = RecordingHistory()
        predictor = UnmaskingPredictor(max_steps=4, tokenizer=LetterTokenizer(), confidence="top_prob",
                                       remask=True, stop_at_eos=True)
        prediction = predictor.predict(batch, model=BagOfTokensModel(seed), history=history)
        for state in history.steps:
            assert torch.equal(state.canvas[given], ids[given])
        assert not (prediction["ids"] == MASK).any()


def test_the_ancestral_sampler_refuses_remasking():
    with pytest.raises(ValueError, match="remask=true needs sampler='confidence'"):
        MDLMPredictor(max_steps=2, tokenizer=LetterTokenizer(), sampler="ancestral", confidence=None, remask=True)


def test_the_history_views_show_what_was_taken_back(tmp_path):
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path, tokenizer=LetterTokenizer())
    _decode(SecondThoughtsModel(), max_steps=3, remask=True, history=recorder)
    sample = load_history(recorder.files_written[0]).sample(0)
    assert sample.taken_back.tolist() == [[False] * 3, [True, False, False], [False] * 3]

    view = step_views(sample)[1]
    assert view.taken_back == 1 and view.masks_remaining == 1 and view.committed == 2
    [taken] = [p for p in view.positions if p.state == "taken_back"]
    assert (taken.position, taken.token, taken.alternatives) == (0, "a", [])
    replay = format_replay(sample, color=False)
    assert "2 committed, 1 taken back, 1 masked" in replay and "0 _ taken back (was a)" in replay
    assert "1 taken back" in step_markdown(view) and "\\_ (was a)" in step_markdown(view)
    assert "taken back (masked again by the remasking predictor)" in overview_markdown(sample, sample.token)
    assert tuple(_cell_colors(sample, 0)[1, 0]) == to_rgba(TAKEN_BACK_COLOR)
    counts = count_revisions([sample]).summary()
    assert counts["taken_back"] == 1 and counts["revisions"] == 1  # a, then b

    write_tensorboard(tmp_path, tmp_path / "tensorboard", max_samples=0, tokenizer=LetterTokenizer())
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    taken = {e.step: e.value for e in events.Scalars("generation/tokens_taken_back_per_step/max")}
    assert taken == {0: 0.0, 1: 1.0, 2: 0.0}


def _first_letter_views(sample):
    """Position 0's confidence in the step views at its two commits ('a', then 'b')."""
    views = step_views(sample)
    return [next(p.confidence for p in views[s].positions if p.position == 0) for s in (0, 2)]


def test_a_token_written_taken_back_and_written_again_has_a_confidence_at_each_commit(tmp_path):
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path, tokenizer=LetterTokenizer())
    _decode(SecondThoughtsModel(), max_steps=3, remask=True, history=recorder)
    path = recorder.files_written[0]
    sample = load_history(path).sample(0)
    assert _first_letter_views(sample) == pytest.approx([0.9, 0.99])  # 'a' at step 0, 'b' at step 2
    assert sample.commit_confidence[1].tolist() == pytest.approx([float("nan"), 0.95, 0.92], nan_ok=True)
    assert "0 a committed, conf 0.900" in format_replay(sample, color=False)
    colors = _cell_colors(sample, 0)
    assert tuple(colors[0, 0]) == pytest.approx(colormaps[CONFIDENCE_COLORMAP](0.9))

    # a file written before step_confidence was stored keeps the last commit's score only
    payload = torch.load(path, weights_only=True)
    del payload["step_confidence"]
    payload["checksums"] = payload_checksums(payload)
    torch.save(payload, path)
    older = load_history(path).sample(0)
    assert older.step_confidence is None
    first, last = _first_letter_views(older)
    assert first != first and last == pytest.approx(0.99)
    assert tuple(_cell_colors(older, 0)[0, 0]) == to_rgba(UNKNOWN_CONFIDENCE_COLOR)
