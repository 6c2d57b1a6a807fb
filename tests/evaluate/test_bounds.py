"""The likelihood helpers the evaluators share: perplexities and the masked-diffusion bound."""

import math

import pytest
import torch

from xdllm.evaluate.bounds import (
    check_bound_options,
    masked_diffusion_bounds,
    perplexity,
    stratified_levels,
    with_perplexities,
)

VOCAB, MASK = 13, 12


def test_perplexity_is_exp_and_inf_where_exp_overflows():
    assert perplexity(math.log(7.0)) == pytest.approx(7.0)
    assert perplexity(1e4) == math.inf


def test_with_perplexities_adds_a_perplexity_for_each_nll_present():
    values = with_perplexities({"nll": 0.0, "loss": 2.0}, [("nll", "ppl"), ("nll_bound", "ppl_bound")])
    assert values == {"nll": 0.0, "loss": 2.0, "ppl": 1.0}


def test_stratified_levels_cover_the_unit_interval_evenly():
    levels = torch.stack([stratified_levels(torch.tensor([0.9]), k, 4) for k in range(4)]).flatten()
    torch.testing.assert_close(levels.sort().values, torch.tensor([0.15, 0.4, 0.65, 0.9]))


def _uniform_denoiser(calls):
    def denoise(noisy):
        calls.append(noisy.clone())
        return torch.zeros(*noisy.shape, VOCAB)
    return denoise


def test_the_bound_of_a_uniform_model_is_about_log_vocab_per_supervised_token():
    clean = torch.randint(0, 10, (64, 12), generator=torch.Generator().manual_seed(0))
    supervised = torch.zeros(64, 12, dtype=torch.bool)
    supervised[:, 4:] = True
    calls = []
    total = masked_diffusion_bounds(_uniform_denoiser(calls), clean, supervised, torch.arange(64),
                                    mask_token_id=MASK, num_levels=16, eps=1e-3, seed=0).sum()
    assert len(calls) == 16
    assert all(bool((noisy[~supervised] == clean[~supervised]).all()) for noisy in calls)  # the prompt is never masked
    assert total.item() / supervised.sum().item() == pytest.approx(math.log(VOCAB), rel=0.05)


def test_the_bound_of_a_sample_does_not_depend_on_its_row_or_padding():
    clean = torch.randint(0, 10, (3, 8), generator=torch.Generator().manual_seed(1))
    supervised = torch.ones(3, 8, dtype=torch.bool)

    def one(rows, index, pad):
        row_clean = torch.cat([clean[rows], torch.zeros(len(rows), pad, dtype=torch.long)], 1)
        row_supervised = torch.cat([supervised[rows], torch.zeros(len(rows), pad, dtype=torch.bool)], 1)

        def denoise(noisy):  # a model whose NLL depends on which tokens are masked
            return torch.nn.functional.one_hot(noisy.clamp(max=VOCAB - 1), VOCAB).float() * 3.0

        return masked_diffusion_bounds(denoise, row_clean, row_supervised, torch.tensor(index),
                                       mask_token_id=MASK, num_levels=3, eps=1e-3, seed=5)

    together = one([0, 1, 2], [0, 1, 2], 0)
    apart = torch.cat([one([i], [i], pad) for i, pad in zip(range(3), (0, 4, 9))])
    torch.testing.assert_close(together, apart)


def test_the_count_estimator_masks_exactly_l_tokens_and_bounds_a_uniform_model_as_the_time_one_does():
    clean = torch.randint(0, 10, (64, 12), generator=torch.Generator().manual_seed(0))
    supervised = torch.zeros(64, 12, dtype=torch.bool)
    supervised[:, 4:] = True
    supervised[:32, 10:] = False  # rows of 6 and of 8 supervised tokens
    calls = []
    total = masked_diffusion_bounds(_uniform_denoiser(calls), clean, supervised, torch.arange(64), mask_token_id=MASK,
                                    num_levels=8, eps=1e-3, seed=0, estimator="count").sum()
    assert total.item() / supervised.sum().item() == pytest.approx(math.log(VOCAB), rel=0.02)
    counts = torch.stack([(noisy == MASK).sum(1) for noisy in calls])  # [levels, rows]
    assert all(bool((noisy[~supervised] == clean[~supervised]).all()) for noisy in calls)
    n = supervised.sum(1)
    assert bool(((counts >= 1) & (counts <= n)).all())
    assert sorted(counts[:, 40].tolist()) == list(range(1, 9))  # 8 stratified levels of 8 tokens: each count once


def _peaked_denoiser(noisy):
    """A model whose NLL of a token depends on how many tokens of its row are masked."""
    masked = (noisy == MASK).sum(1, keepdim=True).float()
    logits = torch.zeros(*noisy.shape, VOCAB)
    return logits.scatter(2, noisy.clamp(max=VOCAB - 1)[..., None], (3.0 - masked).expand(noisy.shape)[..., None])


def test_the_two_estimators_agree_in_expectation_and_the_count_one_spreads_less():
    clean = torch.randint(0, 10, (400, 10), generator=torch.Generator().manual_seed(2))
    supervised = torch.ones(400, 10, dtype=torch.bool)

    def bounds(estimator, seed):
        return masked_diffusion_bounds(_peaked_denoiser, clean, supervised, torch.arange(400), mask_token_id=MASK,
                                       num_levels=2, eps=1e-3, seed=seed, estimator=estimator)

    time, count = (torch.stack([bounds(name, seed) for seed in range(6)]) for name in ("time", "count"))
    assert count.mean().item() == pytest.approx(time.mean().item(), rel=0.05)
    assert count.std(0).mean() < 0.8 * time.std(0).mean()


def test_an_unknown_estimator_is_refused_naming_the_evaluator():
    with pytest.raises(ValueError, match="MDLMEvaluator: estimator must be one of time, count, got 'counts'"):
        check_bound_options("MDLMEvaluator", 4, 1e-3, "counts")
