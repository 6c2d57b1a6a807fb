"""DLLMCollator: hand-written layouts, a region-by-region sweep over every option, errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from xdllm.collate import DLLMCollator

PAD, EOS = 7, 99


def sample(ids, loss, attention=None):
    return {"input_ids": list(ids), "loss_mask": list(loss),
            "attention_mask": list(attention if attention is not None else [1] * len(ids))}


# A: 2 prompt tokens then a 3-token response. B: a 2-token response, no prompt.
PROMPTED = sample([11, 12, 13, 14, 15], [0, 0, 1, 1, 1])
SHORT = sample([21, 22], [1, 1])


def assert_batch(out, input_ids, loss_mask, attention_mask, input_lengths):
    assert list(out) == ["input_ids", "loss_mask", "attention_mask", "input_lengths"]
    assert out["input_ids"].dtype == torch.int64
    assert out["loss_mask"].dtype == torch.float32
    assert out["attention_mask"].dtype == torch.int64
    assert out["input_lengths"].dtype == torch.int64
    assert out["input_ids"].tolist() == input_ids
    assert out["loss_mask"].tolist() == loss_mask
    assert out["attention_mask"].tolist() == attention_mask
    assert out["input_lengths"].tolist() == input_lengths


# --- hand-written layouts -------------------------------------------------------------------

@pytest.mark.parametrize("block_size", [None, 0, 1])
def test_without_blocks_rows_are_padded_to_the_longest(block_size):
    out = DLLMCollator(pad_token_id=PAD, eos_token_id=EOS, block_size=block_size)(
        [PROMPTED, SHORT])
    assert_batch(out,
                 input_ids=[[11, 12, 13, 14, 15], [21, 22, PAD, PAD, PAD]],
                 loss_mask=[[0, 0, 1, 1, 1], [1, 1, 0, 0, 0]],
                 attention_mask=[[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]],
                 input_lengths=[5, 2])


def test_absolute_block_fill_then_global_pad():
    out = DLLMCollator(pad_token_id=PAD, eos_token_id=EOS, block_size=4)([PROMPTED, SHORT])
    assert_batch(out,
                 input_ids=[[11, 12, 13, 14, 15, EOS, EOS, EOS],
                            [21, 22, EOS, EOS, PAD, PAD, PAD, PAD]],
                 loss_mask=[[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0, 0]],
                 attention_mask=[[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0]],
                 input_lengths=[5, 2])


def test_block_fill_uses_pad_id_when_eos_is_none():
    out = DLLMCollator(pad_token_id=PAD, block_size=4)([SHORT])
    assert_batch(out, input_ids=[[21, 22, PAD, PAD]], loss_mask=[[1, 1, 1, 1]],
                 attention_mask=[[1, 1, 0, 0]], input_lengths=[2])


def test_response_window_aligns_fill_on_the_response_and_attends_it():
    out = DLLMCollator(pad_token_id=PAD, eos_token_id=EOS, block_size=4,
                       response_window=True)([PROMPTED, SHORT])
    # PROMPTED: r = 2, c = 5 -> fill_end = 2 + 4 = 6; SHORT: r = 0 -> 4; T = 6.
    assert_batch(out,
                 input_ids=[[11, 12, 13, 14, 15, EOS], [21, 22, EOS, EOS, PAD, PAD]],
                 loss_mask=[[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]],
                 attention_mask=[[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]],
                 input_lengths=[5, 2])


def test_supervise_padding_puts_loss_on_the_global_pad_only():
    out = DLLMCollator(pad_token_id=PAD, eos_token_id=EOS, block_size=4,
                       pad_seq_len_divisible=6, supervise_padding=True)([SHORT])
    # lcm(4, 6) = 12
    assert_batch(out,
                 input_ids=[[21, 22, EOS, EOS] + [PAD] * 8],
                 loss_mask=[[1.0] * 12],
                 attention_mask=[[1, 1] + [0] * 10],
                 input_lengths=[2])


def test_pad_seq_len_divisible_without_blocks():
    out = DLLMCollator(pad_token_id=PAD, pad_seq_len_divisible=3)([PROMPTED])
    assert out["input_ids"].tolist() == [[11, 12, 13, 14, 15, PAD]]
    assert out["loss_mask"].tolist() == [[0, 0, 1, 1, 1, 0]]


def test_truncation_in_the_middle_of_a_block_clips_the_fill_at_max_seq_len():
    long = sample(range(30, 39), [1] * 9)  # 9 tokens, kept 6 (= 1.5 blocks of 4)
    out = DLLMCollator(pad_token_id=PAD, eos_token_id=EOS, block_size=4, max_seq_len=6)(
        [long, SHORT])
    assert_batch(out,
                 input_ids=[[30, 31, 32, 33, 34, 35], [21, 22, EOS, EOS, PAD, PAD]],
                 loss_mask=[[1] * 6, [1, 1, 1, 1, 0, 0]],
                 attention_mask=[[1] * 6, [1, 1, 0, 0, 0, 0]],
                 input_lengths=[6, 2])


def test_max_seq_len_caps_rounding_and_keeps_block_multiple():
    long = sample(range(30, 37), [1] * 7)
    out = DLLMCollator(pad_token_id=PAD, eos_token_id=EOS, block_size=4,
                       pad_seq_len_divisible=3, max_seq_len=8)([long])
    # lcm(4, 3) = 12 would exceed max_seq_len = 8; T = 8 is still a multiple of 4.
    assert_batch(out, input_ids=[[30, 31, 32, 33, 34, 35, 36, EOS]], loss_mask=[[1] * 8],
                 attention_mask=[[1] * 7 + [0]], input_lengths=[7])


def test_response_window_fill_is_clipped_at_max_seq_len():
    row = sample([1, 2, 3, 4, 5, 6, 7, 8], [0, 0, 0, 1, 1, 1, 1, 1])
    out = DLLMCollator(pad_token_id=PAD, eos_token_id=EOS, block_size=4, max_seq_len=6,
                       response_window=True)([row])
    # r = 3, c = 6 -> fill_end = 7 > T = 6: no room for fill.
    assert_batch(out, input_ids=[[1, 2, 3, 4, 5, 6]], loss_mask=[[0, 0, 0, 1, 1, 1]],
                 attention_mask=[[1] * 6], input_lengths=[6])


def test_response_window_without_supervision_treats_the_row_as_prefix():
    out = DLLMCollator(pad_token_id=PAD, eos_token_id=EOS, block_size=4,
                       response_window=True)([sample([1, 2, 3], [0, 0, 0]), SHORT])
    assert_batch(out,
                 input_ids=[[1, 2, 3, PAD], [21, 22, EOS, EOS]],
                 loss_mask=[[0, 0, 0, 0], [1, 1, 1, 1]],
                 attention_mask=[[1, 1, 1, 0], [1, 1, 1, 1]],
                 input_lengths=[3, 2])


def test_response_window_response_cut_off_by_truncation_means_no_fill():
    row = sample([1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 1, 1])
    out = DLLMCollator(pad_token_id=PAD, eos_token_id=EOS, block_size=4, max_seq_len=3,
                       response_window=True)([row])
    assert_batch(out, input_ids=[[1, 2, 3]], loss_mask=[[0, 0, 0]],
                 attention_mask=[[1, 1, 1]], input_lengths=[3])


def test_sample_attention_and_loss_values_are_kept_in_the_content():
    row = sample([5, 6, 7], [True, False, True], attention=[0, 1, True])
    out = DLLMCollator(pad_token_id=PAD, eos_token_id=EOS, block_size=2)(
        [row, sample((8,), (0.5,))])
    assert out["loss_mask"].tolist() == [[1, 0, 1, 1], [0.5, 1, 0, 0]]
    assert out["attention_mask"].tolist() == [[0, 1, 1, 0], [1, 0, 0, 0]]


def test_empty_sample_is_all_padding():
    out = DLLMCollator(pad_token_id=PAD, eos_token_id=EOS, block_size=4)(
        [sample([], []), SHORT])
    assert_batch(out, input_ids=[[PAD] * 4, [21, 22, EOS, EOS]],
                 loss_mask=[[0] * 4, [1] * 4], attention_mask=[[0] * 4, [1, 1, 0, 0]],
                 input_lengths=[0, 2])


# --- every option combination, region by region ----------------------------------------------

SWEEP_BATCH = [
    sample(range(100, 109), [0, 0, 0, 1, 1, 1, 1, 1, 1]),  # prompt 3, response 6
    sample(range(200, 203), [1, 1, 1]),
    sample(range(300, 305), [0, 0, 0, 0, 0]),  # nothing supervised
    sample(range(400, 401), [0]),
]


def expected_layout(batch, block_size, pad_seq_len_divisible, max_seq_len, response_window):
    """Per-row (c, fill_end) and T, computed row by row from the rules in docs/collator.md."""
    block = block_size if block_size and block_size > 1 else 1
    rows = []
    for s in batch:
        c = len(s["input_ids"]) if max_seq_len is None else min(len(s["input_ids"]),
                                                               max_seq_len)
        r = 0
        if response_window:
            r = next((i for i, v in enumerate(s["loss_mask"][:c]) if v), c)
        rows.append((c, r + math.ceil((c - r) / block) * block))
    target = max(end for _, end in rows)
    if pad_seq_len_divisible:
        multiple = math.lcm(block, pad_seq_len_divisible)
        target = math.ceil(target / multiple) * multiple
    if max_seq_len is not None:
        target = min(target, max_seq_len)
    return rows, target


@pytest.mark.parametrize(
    "block_size,pad_seq_len_divisible,max_seq_len,supervise_padding,response_window,eos",
    list(itertools.product([None, 1, 4], [None, 3], [None, 6, 8], [False, True],
                           [False, True], [None, EOS])))
def test_every_option_combination_region_by_region(block_size, pad_seq_len_divisible,
                                                   max_seq_len, supervise_padding,
                                                   response_window, eos):
    collator = DLLMCollator(pad_token_id=PAD, eos_token_id=eos, block_size=block_size,
                            pad_seq_len_divisible=pad_seq_len_divisible,
                            max_seq_len=max_seq_len, supervise_padding=supervise_padding,
                            response_window=response_window)
    out = collator(SWEEP_BATCH)
    rows, target = expected_layout(SWEEP_BATCH, block_size, pad_seq_len_divisible,
                                   max_seq_len, response_window)
    assert out["input_ids"].shape == (len(SWEEP_BATCH), target)
    if max_seq_len is not None:
        assert target <= max_seq_len
    if block_size == 4 and not response_window and max_seq_len != 6:
        assert target % 4 == 0
    fill_id = PAD if eos is None else eos
    for b, (s, (c, fill_end)) in enumerate(zip(SWEEP_BATCH, rows)):
        fill_end = min(fill_end, target)
        ids, loss = out["input_ids"][b].tolist(), out["loss_mask"][b].tolist()
        attention = out["attention_mask"][b].tolist()
        assert out["input_lengths"][b] == c
        assert ids[:c] == s["input_ids"][:c]
        assert loss[:c] == s["loss_mask"][:c]
        assert attention[:c] == s["attention_mask"][:c]
        assert ids[c:fill_end] == [fill_id] * (fill_end - c)
        assert loss[c:fill_end] == [1.0] * (fill_end - c)
        assert attention[c:fill_end] == [int(response_window)] * (fill_end - c)
        assert ids[fill_end:] == [PAD] * (target - fill_end)
        assert loss[fill_end:] == [float(supervise_padding)] * (target - fill_end)
        assert attention[fill_end:] == [0] * (target - fill_end)


# --- errors ----------------------------------------------------------------------------------

def test_empty_batch_is_an_error():
    with pytest.raises(ValueError, match="empty batch"):
        DLLMCollator()([])


@pytest.mark.parametrize("key", ["input_ids", "loss_mask", "attention_mask"])
def test_missing_key_names_sample_and_key(key):
    bad = {k: v for k, v in SHORT.items() if k != key}
    with pytest.raises(ValueError, match=f"sample 1 is missing key '{key}'"):
        DLLMCollator()([SHORT, bad])


@pytest.mark.parametrize("key", ["loss_mask", "attention_mask"])
def test_ragged_sample_names_sample_and_key(key):
    bad = dict(SHORT, **{key: [1, 1, 1]})
    with pytest.raises(ValueError, match=f"sample 2 is ragged: key '{key}' has 3 entries"):
        DLLMCollator()([SHORT, SHORT, bad])


def test_value_that_is_not_a_list_names_sample_and_key():
    with pytest.raises(ValueError, match="sample 0 key 'input_ids' must be a list"):
        DLLMCollator()([dict(SHORT, input_ids=5)])


@pytest.mark.parametrize("bad_id", [2.0, "x", None])
def test_non_integer_ids_name_sample_key_and_position(bad_id):
    bad = dict(SHORT, input_ids=[21, bad_id])
    with pytest.raises(ValueError,
                       match=r"sample 1 key 'input_ids' must hold integer token ids; position 1"):
        DLLMCollator()([SHORT, bad])


def test_out_of_range_id_names_sample_and_key():
    with pytest.raises(ValueError, match="sample 1 key 'input_ids' .* position 1 .* too big"):
        DLLMCollator()([SHORT, dict(SHORT, input_ids=[1, 2 ** 70])])


def test_bad_masks_name_sample_and_key():
    with pytest.raises(ValueError, match="sample 0 key 'loss_mask' .* position 1 is 'y'"):
        DLLMCollator()([dict(SHORT, loss_mask=[1, "y"])])
    with pytest.raises(ValueError, match="sample 1 key 'attention_mask' .* position 0 is 0.5"):
        DLLMCollator()([SHORT, dict(SHORT, attention_mask=[0.5, 1])])


def test_response_window_rejects_several_supervised_runs():
    two_turns = sample([1, 2, 3, 4, 5], [0, 1, 0, 1, 1])
    collator = DLLMCollator(block_size=4, response_window=True)
    with pytest.raises(ValueError, match=r"sample 1 has 2 supervised runs"):
        collator([SHORT, two_turns])
    # The check looks at the whole sample, even where truncation would drop the second run.
    with pytest.raises(ValueError, match="supervised runs"):
        DLLMCollator(block_size=4, max_seq_len=2, response_window=True)([two_turns])
    # Runs do not continue across sample boundaries, and absolute mode does not check.
    collator([sample([1, 2], [0, 1]), sample([3, 4], [1, 0])])
    DLLMCollator(block_size=4)([two_turns])


@pytest.mark.parametrize("kwargs,name", [({"block_size": -1}, "block_size"),
                                         ({"pad_seq_len_divisible": 0}, "pad_seq_len_divisible"),
                                         ({"max_seq_len": 0}, "max_seq_len")])
def test_bad_options_are_rejected(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DLLMCollator(**kwargs)


def test_block_pad_token_id_falls_back_to_pad():
    assert DLLMCollator(pad_token_id=3).block_pad_token_id == 3
    assert DLLMCollator(pad_token_id=3, eos_token_id=4).block_pad_token_id == 4
