"""The BD3-LM bound: block size 1 is the autoregressive NLL, and the estimator is unbiased."""

import itertools

import pytest
import torch
from bd3lm_helpers import examples

from xdllm.losses.token_nll import per_token_nll
from xdllm.nn import BlockCausalMask
from xdllm_models.bd3lm.collator import BD3LMCollator, PackedBD3LMCollator
from xdllm_models.bd3lm.metrics import BD3LMEvaluator

pytestmark = pytest.mark.usefixtures("no_grad")

PROMPTS = [[4, 5, 6], [7], [], [8, 9]]
TARGETS = [[10, 11, 12, 13], [14, 15], [16, 17, 18, 19, 4, 5, 6], [7]]


def _exact_block_nelbo(model, batch, block_size, mask_id):
    """Σ over blocks of Σ_k (1/k) mean over all k-subsets S of Σ_{i in S} NLL: by enumeration."""
    clean, supervised = batch["target_ids"], batch["loss_mask"]
    total = 0.0
    for row in range(clean.shape[0]):
        for start in range(0, clean.shape[1], block_size):
            members = [c for c in range(start, start + block_size) if supervised[row, c]]
            n = len(members)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(members, k))
                for subset in subsets:
                    noisy = clean[row:row + 1].clone()
                    noisy[0, list(subset)] = mask_id
                    end = start + block_size  # the block and the clean blocks before it
                    logits = model(noisy[:, :end], attention_mask=batch["attention_mask"][row:row + 1, :end],
                                   positions=batch["positions"][row:row + 1, :end],
                                   mask_rule=BlockCausalMask(block_size))
                    nll = per_token_nll(logits.float(), clean[row:row + 1, :end])[0]
                    total += float(nll[list(subset)].sum()) / k / len(subsets)
    return total


def test_block_size_one_bound_is_the_autoregressive_nll(tokenizer, network):
    batch = BD3LMCollator(tokenizer, 1, seed=0)(examples(PROMPTS, TARGETS))
    ar_nll = 0.0
    for column in range(batch["target_ids"].shape[1]):  # token by token: x_<i clean, x_i masked
        noisy = batch["target_ids"].clone()
        noisy[:, column] = tokenizer.mask_token_id
        logits = network(noisy[:, :column + 1], attention_mask=batch["attention_mask"][:, :column + 1],
                         positions=batch["positions"][:, :column + 1], mask_rule=BlockCausalMask(1))
        nll = per_token_nll(logits.float(), batch["target_ids"][:, :column + 1])[:, column]
        ar_nll += float(nll[batch["loss_mask"][:, column]].sum())
    for seed, levels in ((0, 1), (7, 3)):
        bound = BD3LMEvaluator(tokenizer, 1, num_levels=levels, seed=seed).bound_sum(network, batch)
        assert float(bound) == pytest.approx(ar_nll, rel=1e-5)


def test_the_bound_estimate_is_unbiased(tokenizer, network):
    batch = BD3LMCollator(tokenizer, 2, seed=0)(examples([[4]], [[10, 11, 12]]))  # two blocks of 2
    exact = _exact_block_nelbo(network, batch, 2, tokenizer.mask_token_id)
    # K = 2 stratified levels hit k = 1 and k = 2 once per block: only which single token is
    # masked at k = 1 is random, so the 2 x 2 outcomes are few and their mean is the bound.
    estimates = []
    for seed in range(40):
        value = float(BD3LMEvaluator(tokenizer, 2, num_levels=2, seed=seed).bound_sum(network, batch))
        if all(abs(value - seen) > 1e-4 for seen in estimates):
            estimates.append(value)
    assert len(estimates) == 4
    assert sum(estimates) / 4 == pytest.approx(exact, rel=1e-5)


def test_eval_metrics_and_packed_rows(tokenizer, network):
    evaluator = BD3LMEvaluator(tokenizer, 4, num_levels=2)
    batch = BD3LMCollator(tokenizer, 4, seed=0)(examples(PROMPTS, TARGETS))
    sums = evaluator.loss_metrics(network, batch, lambda model, batch: {"loss": torch.tensor(1.0)})
    bound, count = sums["nll_bound"]
    assert count == batch["loss_mask"].sum() and bound > 0
    values = evaluator.finalize({"nll_bound": float(bound / count)})
    assert values["ppl_bound"] == pytest.approx(torch.exp(bound / count).item())
    # the same bound over the text only: each target and its EOS, not the EOS fill to whole blocks
    text_bound, text_count = sums["text_nll_bound"]
    assert text_bound == bound and text_count == sum(len(target) + 1 for target in TARGETS) < count
    assert set(evaluator.finalize({"text_nll_bound": 0.5})) == {"text_nll_bound", "text_ppl_bound"}
    packed = PackedBD3LMCollator(tokenizer, 4, row_length=32)(examples(PROMPTS, TARGETS))
    with pytest.raises(ValueError, match="not packed rows"):
        evaluator.bound_sum(network, packed)
