"""With ``prefix_cache``, a row decodes the same tokens in a batch as alone where the batch's
refreshes and prefix are the row's own: rows that keep the same schedule (a fixed number of
tokens per step), and rows that finish at their own steps (a threshold, an entropy budget) without
blocks, since rows that finish leave the cache without refreshing the others. (With blocks and
rows at different paces the refreshes follow the batch's earliest block: docs/predictor.md,
"Randomness and invariance".)"""

import pytest
import torch
from predict_fakes import LetterTokenizer, letter, prompt_batch
from random_weights import sharpened

from xdllm.nn.factory import denoiser_transformer
from xdllm.predict import UnmaskingPredictor

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
    # rows that finish early leave the cache; the others keep their keys, as alone
    dict(max_steps=6, confidence="top_prob", threshold=0.3),
    dict(max_steps=6, temperature=0.7, confidence="entropy", entropy_budget=1.0, prefix_cache_refresh=3),
])
def test_a_row_decodes_in_a_batch_as_alone(options):
    predictor = UnmaskingPredictor(max_new_tokens=6, tokenizer=LetterTokenizer(), prefix_cache=True, seed=3,
                                   **options)
    model = two_layers()
    indices = torch.arange(10, 10 + len(PROMPTS))
    together = predictor.predict(prompt_batch(PROMPTS, sample_index=indices), model=model)
    alone = [predictor.predict(prompt_batch([prompt], sample_index=indices[row:row + 1]), model=model)
             for row, prompt in enumerate(PROMPTS)]
    assert together["text"] == [prediction["text"][0] for prediction in alone]
