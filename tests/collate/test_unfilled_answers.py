"""Answers of varying length after prompts (or documents of varying length), without EOS fill:
the collators that train a model to fill a canvas of max_new_tokens masks say once that
generation will overrun the answers (or write text that never ends), naming the override that
fills them."""

import logging

import pytest

from xdllm.collate import examples as collate_examples
from xdllm.data.tokenizer import builtin_tokenizer
from xdllm_models.mdlm.collator import MDLMCollator
from xdllm_models.mlm.collator import DefaultMLMCollator, MLMSeq2SeqTrainCollator
from xdllm_models.mlm.packed_collator import PackedMLMCollator

TOKENIZER = builtin_tokenizer()


def _examples(target_lengths, prompt_length=3):
    return [dict(prompt_ids=[5] * prompt_length, target_ids=[6] * length, sample_index=index, step=0)
            for index, length in enumerate(target_lengths)]


COLLATORS = [(lambda **kw: MLMSeq2SeqTrainCollator(TOKENIZER, **kw), "MLMSeq2SeqTrainCollator", "mlm.target_length"),
             (lambda **kw: PackedMLMCollator(TOKENIZER, row_length=32, **kw), "PackedMLMCollator",
              "mlm.target_length"),
             (lambda **kw: MDLMCollator(TOKENIZER, **kw), "MDLMCollator", "mdlm.target_length")]


@pytest.fixture(autouse=True)
def _nothing_warned_yet(monkeypatch):
    monkeypatch.setattr(collate_examples, "_warned_unfilled", set())


@pytest.mark.parametrize(("make", "name", "knob"), COLLATORS)
def test_varying_answers_without_fill_are_named_once(caplog, make, name, knob):
    with caplog.at_level(logging.WARNING, logger="xdllm.collate"):
        make()(_examples([2, 2]))
        assert not caplog.records  # one length: nothing past an answer's end to learn
        make()(_examples([2, 5]))
        make()(_examples([1, 7]))  # the val collator, or a loader worker's copy
    assert [record.getMessage() for record in caplog.records] == [
        f"{name}: answers in one batch are 2 to 5 tokens long and {knob} is null: training never shows the model "
        "masks past an answer's end, so generation (max_new_tokens masks after the prompt) will fill them with "
        f"more answer; for answers of varying length set {knob}='${{derived.max_new_tokens}}' (EOS fill)"]


@pytest.mark.parametrize(("make", "name", "knob"), COLLATORS)
def test_filled_or_unprompted_answers_are_not_warned_about(caplog, make, name, knob):
    with caplog.at_level(logging.WARNING, logger="xdllm.collate"):
        make(target_length=8)(_examples([2, 5]))
        DefaultMLMCollator(TOKENIZER)(_examples([2, 5]))  # pre-training supervises the whole sequence
        MDLMCollator(TOKENIZER, block_size=4)(_examples([2, 5]))  # blocks end in EOS fill
    assert not caplog.records


@pytest.mark.parametrize(("make", "name", "knob"), COLLATORS)
def test_free_text_documents_without_fill_are_named_once(caplog, make, name, knob):
    with caplog.at_level(logging.WARNING, logger="xdllm.collate"):
        make(target_length=8)(_examples([2, 5], prompt_length=0))  # filled: nothing to say
        make()(_examples([3, 6], prompt_length=0))
        make()(_examples([1, 7], prompt_length=0))
    assert [record.getMessage() for record in caplog.records] == [
        f"{name}: documents in one batch are 3 to 6 tokens long and {knob} is null: training never shows the model "
        "masks past a document's end, so generation from an empty prompt (max_new_tokens masks) writes text that "
        f"runs on to the end of the canvas and never ends; for texts that end set {knob}='${{derived.max_new_tokens}}' "
        "(EOS fill)"]
