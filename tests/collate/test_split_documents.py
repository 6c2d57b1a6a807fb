"""A document longer than the packed rows is trained in chunks, each attending only within itself:
every packed collator says so once, naming the lengths and the overrides that keep documents
whole (a text_file corpus cut at task.params.max_tokens=128 made documents of 130 tokens with bos
and eos, trained as 128 + 2)."""

import logging

import pytest

from xdllm.collate import examples as collate_examples
from xdllm.data.tokenizer import builtin_tokenizer
from xdllm_models.arlm.collator import PackedARLMCollator
from xdllm_models.bd3lm.collator import PackedBD3LMCollator
from xdllm_models.mlm.packed_collator import PackedMLMCollator

TOKENIZER = builtin_tokenizer()
COLLATORS = [(lambda: PackedMLMCollator(TOKENIZER, row_length=16, target_length=20), "PackedMLMCollator"),
             (lambda: PackedARLMCollator(TOKENIZER, row_length=16, target_length=20), "PackedARLMCollator"),
             (lambda: PackedBD3LMCollator(TOKENIZER, block_size=2, row_length=16, target_length=20),
              "PackedBD3LMCollator")]


def _documents(target_length):
    return [dict(prompt_ids=[], target_ids=[6] * target_length, sample_index=index, step=0) for index in range(2)]


@pytest.fixture(autouse=True)
def _nothing_warned_yet(monkeypatch):
    monkeypatch.setattr(collate_examples, "_warned_split", set())


@pytest.mark.parametrize(("make", "name"), COLLATORS)
def test_documents_longer_than_a_row_are_named_once(caplog, make, name):
    collator = make()
    collator.row_length = 24  # a whole document (bos and 20 slots: 21 tokens) fits: nothing to say
    with caplog.at_level(logging.WARNING, logger="xdllm.collate"):
        collator(_documents(5))
        assert not caplog.records
        collator.row_length = 16
        batch = collator(_documents(5))
        collator(_documents(7))
    assert batch["segment_ids"].max() >= 1  # the rows hold chunks
    longest = 21  # bos + target_length slots (the target, its EOS and the fill); 20 is whole blocks of 2
    assert [record.getMessage() for record in caplog.records] == [
        f"{name}: a document of {longest} tokens (bos and eos included) is longer than the packed rows "
        "(row_length=16): it is trained as chunks of at most 16 tokens, each attending only within itself; to "
        "train on whole documents set collator.train.row_length and collator.val.row_length to at least the "
        "longest document's length"]
