"""DLLMCollator properties on random batches and options (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xdllm.collate import DLLMCollator

PAD, EOS = 7, 99
SETTINGS = settings(max_examples=75, deadline=None, derandomize=True)


@st.composite
def single_turn_sample(draw):
    """prompt (unsupervised), one response run, optional unsupervised tail."""
    prompt, response, tail = (draw(st.integers(0, 6)), draw(st.integers(0, 6)),
                              draw(st.integers(0, 3)))
    length = prompt + response + tail
    return {"input_ids": draw(st.lists(st.integers(0, 1000), min_size=length,
                                       max_size=length)),
            "loss_mask": [0] * prompt + [1] * response + [0] * tail,
            "attention_mask": draw(st.lists(st.integers(0, 1), min_size=length,
                                            max_size=length))}


@st.composite
def options(draw):
    return {"pad_token_id": PAD,
            "eos_token_id": draw(st.sampled_from([None, EOS])),
            "block_size": draw(st.sampled_from([None, 1, 2, 3, 4, 8])),
            "pad_seq_len_divisible": draw(st.sampled_from([None, 1, 2, 3, 5, 6])),
            "max_seq_len": draw(st.one_of(st.none(), st.integers(1, 16))),
            "supervise_padding": draw(st.booleans()),
            "response_window": draw(st.booleans())}


batches = st.lists(single_turn_sample(), min_size=1, max_size=5)


def kept_length(sample, max_seq_len):
    return len(sample["input_ids"]) if max_seq_len is None else min(len(sample["input_ids"]),
                                                                   max_seq_len)


def fill_end(sample, opts, target):
    """Where the row's block fill stops (docs/collator.md), clipped at T."""
    block = max(opts["block_size"] or 1, 1)
    c = kept_length(sample, opts["max_seq_len"])
    start = 0
    if opts["response_window"]:
        start = next((i for i, v in enumerate(sample["loss_mask"][:c]) if v), c)
    return min(start + -(-(c - start) // block) * block, target), start


@SETTINGS
@given(batch=batches, opts=options())
def test_length_bounds_and_divisibility(batch, opts):
    out = DLLMCollator(**opts)(batch)
    target = out["input_ids"].shape[1]
    kept = [kept_length(s, opts["max_seq_len"]) for s in batch]
    block = max(opts["block_size"] or 1, 1)
    multiple = 1
    if opts["pad_seq_len_divisible"]:
        multiple = math.lcm(block, opts["pad_seq_len_divisible"])

    assert out["input_lengths"].tolist() == kept
    assert target >= max(kept)
    max_seq_len = opts["max_seq_len"]
    if max_seq_len is not None:
        assert target <= max_seq_len
    if max_seq_len is None or target < max_seq_len:
        assert target % multiple == 0
    if (not opts["response_window"] and block > 1
            and (max_seq_len is None or max_seq_len % block == 0)):
        assert target % block == 0
    # Minimal: no whole rounding unit of pure global padding in every row.
    used = max(fill_end(s, opts, target)[0] for s in batch)
    assert target - used < multiple


@SETTINGS
@given(batch=batches, opts=options())
def test_content_is_preserved_and_regions_hold_their_values(batch, opts):
    out = DLLMCollator(**opts)(batch)
    target = out["input_ids"].shape[1]
    fill_id = PAD if opts["eos_token_id"] is None else opts["eos_token_id"]
    block = max(opts["block_size"] or 1, 1)
    for b, s in enumerate(batch):
        c = kept_length(s, opts["max_seq_len"])
        end, start = fill_end(s, opts, target)
        ids, loss = out["input_ids"][b].tolist(), out["loss_mask"][b].tolist()
        attention = out["attention_mask"][b].tolist()
        assert ids[:c] == s["input_ids"][:c]
        assert loss[:c] == s["loss_mask"][:c]
        assert attention[:c] == s["attention_mask"][:c]
        assert ids[c:end] == [fill_id] * (end - c)
        assert loss[c:end] == [1.0] * (end - c)
        assert attention[c:end] == [int(opts["response_window"])] * (end - c)
        assert ids[end:] == [PAD] * (target - end)
        assert loss[end:] == [float(opts["supervise_padding"])] * (target - end)
        assert attention[end:] == [0] * (target - end)
        # The filled part is whole blocks unless T cut it short, and less than a block longer
        # than the content.
        if end < target:
            assert (end - start) % block == 0
        assert end - c < block


@settings(max_examples=40, deadline=None, derandomize=True)
@given(batch=batches, opts=options())
def test_a_row_does_not_depend_on_its_batch_mates(batch, opts):
    together = DLLMCollator(**opts)(batch)
    for b, s in enumerate(batch):
        alone = DLLMCollator(**opts)([s])
        width = alone["input_ids"].shape[1]
        for key in ("input_ids", "loss_mask", "attention_mask"):
            assert together[key][b, :width].tolist() == alone[key][0].tolist()


@settings(max_examples=30, deadline=None, derandomize=True)
@given(batch=batches, extra=st.integers(0, 4), position=st.integers(0, 5))
def test_response_window_rejects_any_sample_with_two_runs(batch, extra, position):
    index = min(position, len(batch))
    two_runs = {"input_ids": [1] * (extra + 3), "loss_mask": [1] * extra + [1, 0, 1],
                "attention_mask": [1] * (extra + 3)}
    batch = batch[:index] + [two_runs] + batch[index:]
    with pytest.raises(ValueError, match=rf"sample {index} has 2 supervised runs"):
        DLLMCollator(block_size=4, response_window=True)(batch)
