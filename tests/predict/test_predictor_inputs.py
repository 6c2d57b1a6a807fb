"""The shared predictor checks name the predictor and what is missing."""

import pytest
import torch

from xdllm.data.tokenizer import builtin_tokenizer
from xdllm.predict.inputs import predictor_inputs

BATCH = {"input_ids": torch.zeros(1, 2, dtype=torch.long), "attention_mask": torch.ones(1, 2, dtype=torch.bool)}


def test_the_call_model_wins_over_the_default_and_both_checks_pass():
    default, given, tokenizer = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1), builtin_tokenizer()
    assert predictor_inputs("P", BATCH, given, default, tokenizer) == (given, tokenizer)
    assert predictor_inputs("P", BATCH, None, default, tokenizer) == (default, tokenizer)


def test_missing_model_tokenizer_or_key_is_named():
    tokenizer = builtin_tokenizer()
    with pytest.raises(ValueError, match="P: no model"):
        predictor_inputs("P", BATCH, None, None, tokenizer)
    with pytest.raises(ValueError, match="P needs a tokenizer"):
        predictor_inputs("P", BATCH, torch.nn.Linear(1, 1), None, None)
    with pytest.raises(KeyError, match="P: prediction batch has no 'attention_mask'"):
        predictor_inputs("P", {"input_ids": BATCH["input_ids"]}, torch.nn.Linear(1, 1), None, tokenizer)
