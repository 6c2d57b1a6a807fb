"""With ``prefix_cache`` a row decodes the same tokens in a batch as alone: each row keeps its own
keys and refreshes on its own schedule, whatever the pace of the batch's other rows (thresholds,
entropy budgets, blocks, the dual cache, MDLM's ReMDM sampler running some rows only)."""

import pytest
import torch
from predict_fakes import LetterTokenizer, letter, prompt_batch
from random_weights import sharpened

from xdllm.nn.factory import denoiser_transformer
from xdllm.predict import UnmaskingPredictor
from xdllm_models.mdlm.predictor import MDLMPredictor

PROMPTS = [[letter("a")], [letter("b"), letter("c"), letter("d")], [], [letter("e"), letter("a")]]


def two_layers():
    """Two layers (the kept keys are stale, so the refresh steps matter), float64 (no near-ties
    flipped by a kernel's last bits over another padding width)."""
    torch.manual_seed(0)
    return sharpened(denoiser_transformer(vocab_size=16, d_model=32, n_layers=2, n_heads=2,
                                          max_positions=64).eval()).double()


@pytest.mark.parametrize("options", [
    dict(max_steps=3, confidence="top_prob"),
    dict(max_steps=6, confidence="prob_diff", block_size=2),
    dict(max_steps=6, temperature=1.0, top_p=0.9, confidence=None, block_size=3),
    dict(max_steps=6, confidence="entropy", block_size=2, dual_cache=True),
    dict(max_steps=5, temperature=0.7, confidence="top_prob", prefix_cache_refresh=2),
    # rows at their own paces: they finish, and finish blocks, at different steps
    dict(max_steps=6, confidence="top_prob", threshold=0.3),
    dict(max_steps=6, temperature=0.7, confidence="entropy", entropy_budget=1.0, prefix_cache_refresh=3),
    dict(max_steps=6, confidence="top_prob", threshold=0.3, block_size=2),
    dict(max_steps=6, confidence="top_prob", threshold=0.5, block_size=3),
    dict(max_steps=6, confidence="prob_diff", threshold=0.2, block_size=3, dual_cache=True),
    dict(max_steps=6, temperature=0.7, confidence="top_prob", entropy_budget=0.5, block_size=2, dual_cache=True),
])
def test_a_row_decodes_in_a_batch_as_alone(options):
    _assert_rows_decode_as_alone(UnmaskingPredictor(max_new_tokens=6, tokenizer=LetterTokenizer(), prefix_cache=True,
                                                    seed=3, **options))


def test_remdm_rows_decode_in_a_batch_as_alone():
    """ReMDM runs the model only for the rows that reveal at a step: a row that runs again
    refreshes its own keys, not its neighbours'."""
    _assert_rows_decode_as_alone(MDLMPredictor(max_steps=12, max_new_tokens=6, tokenizer=LetterTokenizer(),
                                               sampler="remdm", confidence=None, remdm_eta=0.2, temperature=1.0,
                                               prefix_cache=True, seed=1))


def _assert_rows_decode_as_alone(predictor):
    model = two_layers()
    indices = torch.arange(10, 10 + len(PROMPTS))
    together = predictor.predict(prompt_batch(PROMPTS, sample_index=indices), model=model)
    alone = [predictor.predict(prompt_batch([prompt], sample_index=indices[row:row + 1]), model=model)
             for row, prompt in enumerate(PROMPTS)]
    assert together["text"] == [prediction["text"][0] for prediction in alone]
    assert together["steps_taken"] == [prediction["steps_taken"][0] for prediction in alone]
