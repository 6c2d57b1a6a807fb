"""Which positions the engine commits, and when, against hand-built distributions."""

import pytest
import torch
from predict_fakes import (
    EOS,
    MASK,
    PAD,
    LetterTokenizer,
    PositionTableModel,
    RecordingHistory,
    letter,
    position_table,
    prompt_batch,
)

from xdllm.predict import UnmaskingPredictor

# Output positions 2..5 after the prompt [bos, a]. Scores of the argmax token:
#            top_prob  prob_diff  entropy (-H)
# pos 2 (A)    0.50      0.00      -0.693
# pos 3 (B)    0.60      0.50      -1.228
# pos 4 (C)    0.55      0.10      -0.688
# pos 5 (D)    0.40      0.25      -1.505
FOUR = {
    2: {letter("a"): 0.5, letter("b"): 0.5},
    3: {letter("c"): 0.6, letter("d"): 0.1, letter("e"): 0.1, letter("f"): 0.1, letter("g"): 0.1},
    4: {letter("h"): 0.55, letter("i"): 0.45},
    5: {letter("j"): 0.4, letter("k"): 0.15, letter("l"): 0.15, letter("m"): 0.15,
        letter("n"): 0.15},
}


def run(table_rows=FOUR, prompts=([letter("a")],), max_new_tokens=4, **options):
    model = PositionTableModel(position_table(table_rows))
    history = RecordingHistory()
    batch = options.pop("batch", None) or prompt_batch(list(prompts))
    predictor = UnmaskingPredictor(max_new_tokens=max_new_tokens, tokenizer=LetterTokenizer(),
                                   **options)
    prediction = predictor.predict(batch, model=model, history=history)
    return prediction, history, model


@pytest.mark.parametrize("confidence, order", [
    ("top_prob", [[3], [4], [2], [5]]),
    ("prob_diff", [[3], [5], [4], [2]]),
    ("entropy", [[4], [2], [3], [5]]),
])
def test_one_per_step_follows_confidence(confidence, order):
    prediction, history, _ = run(max_steps=4, confidence=confidence)
    assert history.commit_order(0) == order
    assert prediction["text"] == ["achj"]
    assert prediction["steps_taken"] == [4]


@pytest.mark.parametrize("confidence, threshold, order", [
    ("top_prob", 0.55, [[3, 4], [2], [5]]),
    ("prob_diff", 0.25, [[3, 5], [4], [2]]),
    ("entropy", -1.3, [[2, 3, 4], [5]]),
    ("entropy", -0.69, [[4], [2], [3], [5]]),
    ("top_prob", 0.99, [[3], [4], [2], [5]]),
])
def test_threshold_commits_everything_above_and_at_least_one(confidence, threshold, order):
    prediction, history, model = run(max_steps=4, confidence=confidence, threshold=threshold)
    assert history.commit_order(0) == order
    assert prediction["steps_taken"] == [len(order)] == [len(model.calls)]
    assert prediction["text"] == ["achj"]


# Entropies of FOUR's distributions: pos 2 0.693, pos 3 1.228, pos 4 0.688, pos 5 1.505 nats. In
# top_prob order (3, 4, 2, 5) the entropy summed less its largest grows 0, 0.688, 1.381, 2.609.
@pytest.mark.parametrize("budget, options, order", [
    (0.0, {}, [[3], [4], [2], [5]]),              # nothing certain: one per step, as without a budget
    (0.7, {}, [[3, 4], [2, 5]]),                  # then 2 and 5: 0.693 <= 0.7
    (1.4, {}, [[2, 3, 4], [5]]),
    (2.7, {}, [[2, 3, 4, 5]]),
    (0.0, {"max_steps": 2}, [[3, 4], [2, 5]]),   # the schedule stays a floor
    (0.0, {"top_k": 1}, [[2, 3, 4, 5]]),          # entropies of the final distributions: all 0
])
def test_an_entropy_budget_commits_the_most_confident_while_their_entropy_fits(budget, options, order):
    prediction, history, model = run(**{"max_steps": 4, **options}, confidence="top_prob", entropy_budget=budget)
    assert history.commit_order(0) == order
    assert prediction["steps_taken"] == [len(order)] == [len(model.calls)]
    assert prediction["text"] == ["achj"]


def test_a_negative_entropy_budget_is_refused():
    with pytest.raises(ValueError, match="entropy_budget must be >= 0 \\(nats\\) or null, got -0.1"):
        run(max_steps=4, entropy_budget=-0.1)


def test_threshold_never_falls_behind_the_schedule():
    _, history, _ = run(max_steps=2, confidence="top_prob", threshold=0.99)
    assert history.commit_order(0) == [[3, 4], [2, 5]]


def test_steps_spread_masks_evenly_and_finish_exactly():
    _, history, _ = run(max_steps=3, confidence="top_prob")
    assert history.commit_order(0) == [[3, 4], [2], [5]]
    _, history, _ = run(max_steps=1, confidence="entropy")
    assert history.commit_order(0) == [[2, 3, 4, 5]]


def test_more_steps_than_masks_uses_one_pass_per_mask():
    prediction, history, model = run(max_steps=10, max_new_tokens=2, confidence="top_prob")
    assert history.commit_order(0) == [[3], [2]]
    assert prediction["steps_taken"] == [2] and len(model.calls) == 2


@pytest.mark.parametrize("schedule, sizes", [
    ("linear", [2, 2, 2, 2]), ("cosine", [1, 2, 3, 2]), ("log_linear", [2, 2, 2, 2])])
def test_noise_schedule_sets_the_count(schedule, sizes):
    rows = {p: {letter("a"): 0.98 - 0.04 * p, letter("b"): 0.02 + 0.04 * p} for p in range(2, 10)}
    prediction, history, _ = run(rows, max_new_tokens=8, max_steps=4, noise_schedule=schedule,
                                 confidence="top_prob")
    assert [len(cols) for cols in history.commit_order(0)] == sizes
    assert history.commit_order(0)[0] == list(range(2, 2 + sizes[0]))
    assert prediction["text"] == ["a" * 8]


@pytest.mark.parametrize("max_steps, order", [
    (4, [[3], [2], [4], [5]]), (2, [[2, 3], [4, 5]]), (3, [[3], [2], [4, 5]])])
def test_blocks_are_decoded_left_to_right(max_steps, order):
    _, history, _ = run(max_steps=max_steps, block_size=2, confidence="top_prob")
    assert history.commit_order(0) == order


def test_block_finishing_early_hands_its_steps_on():
    # block 0 = positions 2,3 both above threshold: done in one step; block 1 gets 3 steps.
    rows = {2: {letter("a"): 1.0}, 3: {letter("b"): 1.0}, 4: FOUR[4], 5: FOUR[5]}
    _, history, _ = run(rows, max_steps=4, block_size=2, confidence="top_prob", threshold=0.9)
    assert history.commit_order(0) == [[2, 3], [4], [5]]


def test_too_few_steps_for_the_blocks_is_an_error():
    with pytest.raises(ValueError, match="number of blocks"):
        run(max_steps=1, block_size=2)


def test_random_order_is_seeded_and_fills_everything():
    orders = {seed: run(max_steps=4, seed=seed)[1].commit_order(0) for seed in range(6)}
    assert run(max_steps=4, seed=3)[1].commit_order(0) == orders[3]
    assert len({str(order) for order in orders.values()}) > 1
    for order in orders.values():
        assert sorted(sum(order, [])) == [2, 3, 4, 5]


def test_stop_at_eos_pads_the_rest_and_finishes_early():
    rows = {2: {letter("a"): 1.0}, 3: {EOS: 1.0}, 4: {letter("b"): 0.3, letter("c"): 0.7},
            5: {letter("d"): 0.3, letter("c"): 0.7}}
    prediction, history, _ = run(rows, max_steps=4, confidence="top_prob", stop_at_eos=True)
    assert prediction["steps_taken"] == [2]
    assert history.commit_order(0) == [[2], [3, 4, 5]]
    assert prediction["ids"][0, 2:].tolist() == [letter("a"), EOS, PAD, PAD]
    assert prediction["text"] == ["a"]
    prediction, _, _ = run(rows, max_steps=4, confidence="top_prob")
    assert prediction["steps_taken"] == [4]
    assert prediction["ids"][0, 2:].tolist() == [letter("a"), EOS, letter("c"), letter("c")]
    assert prediction["text"] == ["a"]


def test_eos_with_masks_before_it_waits():
    rows = {2: {letter("a"): 0.9, letter("b"): 0.1}, 3: {EOS: 1.0},
            4: {letter("b"): 0.3, letter("c"): 0.7}, 5: {letter("c"): 0.4, letter("d"): 0.6}}
    prediction, history, _ = run(rows, max_steps=4, confidence="top_prob", stop_at_eos=True)
    assert history.commit_order(0) == [[3], [2, 4, 5]]
    assert history.steps[0].canvas[0, 4:].tolist() == [MASK, MASK]
    assert prediction["steps_taken"] == [2]


def test_finished_rows_leave_the_forward_pass():
    # infilling: row 0 has one mask, row 1 four; row 0 is done after one pass.
    ids = torch.tensor([[2, letter("a"), MASK, letter("b"), 4, 4],
                        [2, MASK, MASK, MASK, MASK, letter("c")]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids, dtype=torch.bool)}
    rows = {p: {letter("e"): 0.5 + 0.1 * p, letter("f"): 0.5 - 0.1 * p} for p in range(5)}
    prediction, history, model = run(rows, max_new_tokens=None, max_steps=4,
                                     confidence="top_prob", batch=batch)
    assert prediction["steps_taken"] == [1, 4]
    assert [call.shape[0] for call in model.calls] == [2, 1, 1, 1]
    assert [bool(s.active[0]) for s in history.steps] == [True, False, False, False]
    assert prediction["output_start_idx"].tolist() == [2, 1]
    assert prediction["text"] == ["e", "eeee"]
    assert history.commit_order(1) == [[4], [3], [2], [1]]
    assert len(prediction["time_taken"]) == 2
    assert prediction["time_taken"][0] <= prediction["time_taken"][1]


def test_step_states_hold_each_active_row_s_window_top_k_and_nothing_else():
    # Right-aligned infilling windows of different starts and lengths (the gather path); row 0
    # finishes after one step, so later states must carry zeros for it.
    ids = torch.tensor([[2, letter("a"), MASK, letter("b"), 4, 4],
                        [2, MASK, MASK, MASK, MASK, letter("c")]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids, dtype=torch.bool)}
    rows = {p: {letter("e"): 0.5 + 0.1 * p, letter("f"): 0.5 - 0.1 * p} for p in range(5)}
    _, history, _ = run(rows, max_new_tokens=None, max_steps=4, confidence="top_prob", batch=batch)
    table = position_table(rows).softmax(-1)
    windows = {0: [2], 1: [1, 2, 3, 4]}  # canvas columns of each row's window offsets
    for state in history.steps:
        assert state.output_start.tolist() == [2, 1]
        assert state.window_valid.tolist() == [[True, False, False, False], [True] * 4]
        for row, columns in windows.items():
            width = len(columns) if bool(state.active[row]) else 0
            for values in (state.topk_ids, state.topk_probs, state.committed, state.confidence):
                assert not values[row, width:].any()
            if width:
                top = table[columns].topk(history.k, dim=-1)  # two tokens with mass, then zeros
                torch.testing.assert_close(state.topk_probs[row, :width], top.values)
                assert torch.equal(state.topk_ids[row, :width, :2], top.indices[:, :2])
                for offset in state.committed[row].nonzero().flatten().tolist():
                    assert state.confidence[row, offset] == pytest.approx(
                        table[columns[offset]].max().item())
    assert [bool(s.active[0]) for s in history.steps] == [True, False, False, False]


def test_a_token_padded_away_after_eos_is_not_committed_again():
    rows = {2: {letter("a"): 0.5, letter("b"): 0.5}, 3: {EOS: 0.6, letter("d"): 0.4},
            4: {letter("c"): 0.9, letter("d"): 0.1}}
    prediction, history, _ = run(rows, max_new_tokens=3, max_steps=3, confidence="top_prob",
                                 stop_at_eos=True)
    assert history.commit_order(0) == [[4], [3], [2]]
    assert prediction["ids"][0, 2:].tolist() == [letter("a"), EOS, PAD]
