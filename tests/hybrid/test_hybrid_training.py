"""Hybrid training: the [x_t | x_0] mask, block-aligned rows, and the loss (alpha = 0 is the AR objective)."""

import math

import pytest
import torch
from hybrid_helpers import examples

from xdllm.interfaces import LossContext
from xdllm.nn import BlockCausalMask, CausalMask
from xdllm.nn.masks import PAD_DOCUMENT_ID
from xdllm_models.arlm.collator import ARLMCollator
from xdllm_models.arlm.loss import ARLMLoss
from xdllm_models.arlm.metrics import ARLMEvaluator
from xdllm_models.hybrid.collator import HybridCollator
from xdllm_models.hybrid.loss import HybridLoss
from xdllm_models.hybrid.masks import HybridTrainingMask
from xdllm_models.hybrid.metrics import HybridEvaluator
from xdllm_models.mdlm.collator import MDLMCollator

PROMPTS = [[4, 5, 6], [], [7, 8]]
TARGETS = [[9, 10], [11, 12, 13, 14], [15]]
BLOCK = 4


def batch_of(tokenizer, step: int = 0):
    return HybridCollator(tokenizer, block_size=BLOCK, seed=3)(examples(PROMPTS, TARGETS, step=step))


def test_noisy_blocks_see_themselves_and_earlier_clean_blocks_and_the_clean_half_is_causal():
    rule = HybridTrainingMask(block_size=2)
    tokens = rule.tokens(torch.zeros(1, 8, dtype=torch.long), torch.arange(4).repeat(2)[None])
    expected = [[1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0],  # noisy block 0: itself
                [0, 0, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 0, 0],  # noisy block 1: itself, clean block 0
                [0, 0, 0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0],  # clean: causal over the clean half
                [0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 1, 1, 1, 1]]
    assert rule.dense(tokens, tokens)[0, 0].int().tolist() == expected
    document = torch.tensor([[0, 0, PAD_DOCUMENT_ID, PAD_DOCUMENT_ID] * 2])
    padded = rule.dense(*(2 * (rule.tokens(document, torch.arange(4).repeat(2)[None]),)))[0, 0]
    assert not padded[:, [2, 3, 6, 7]][[0, 1, 4, 5]].any()  # real tokens never see padding
    assert padded.diagonal().all()  # and every token sees itself


def test_rows_are_mdlm_rows_with_every_response_starting_a_block(tokenizer):
    batch = batch_of(tokenizer)
    reference = MDLMCollator(tokenizer, seed=3, corruption="blockwise", block_size=BLOCK)(
        examples(PROMPTS, TARGETS))
    for key, value in reference.items():
        assert torch.equal(batch[key], value), key
    eos = tokenizer.eos_token_id
    assert batch["target_ids"][1].tolist() == [2, 11, 12, 13, 14, eos, eos, eos, eos]  # 5 -> 2 whole blocks
    response_start = torch.tensor([4, 1, 3])
    start_positions = batch["positions"].gather(1, response_start[:, None])[:, 0]
    assert (start_positions % BLOCK == 0).all()
    assert (batch["positions"].diff(dim=1) == 1).all()  # consecutive inside each row: only shifted


def test_alpha_zero_trains_exactly_the_next_token_objective(tiny_model, tokenizer):
    batch = batch_of(tokenizer)
    hybrid = HybridLoss(block_size=BLOCK, alpha=0.0)(tiny_model, batch)["loss"]
    hybrid.backward()
    hybrid_grads = [p.grad.clone() for p in tiny_model.parameters()]
    tiny_model.zero_grad()
    causal_batch = {"input_ids": batch["target_ids"], "loss_mask": batch["loss_mask"].bool(),
                    "attention_mask": batch["attention_mask"], "positions": batch["positions"]}
    causal = ARLMLoss()(tiny_model, causal_batch)["loss"]
    causal.backward()
    torch.testing.assert_close(hybrid, causal, rtol=1e-6, atol=1e-6)
    for name_grad, (name, parameter) in zip(hybrid_grads, tiny_model.named_parameters()):
        torch.testing.assert_close(name_grad, parameter.grad, rtol=1e-5, atol=1e-6, msg=name)
    assert any(g.abs().sum() > 0 for g in hybrid_grads)


def test_the_diffusion_branch_is_what_cached_block_decoding_computes(tiny_model, tokenizer):
    """Block b of the noisy half, denoised from the clean blocks before it, equals a causal prefill
    of those clean tokens into a KV cache followed by the noisy block reading it."""
    batch = batch_of(tokenizer)
    with torch.no_grad():
        diffusion = tiny_model.branches(batch["input_ids"], batch["target_ids"], batch["attention_mask"],
                                        batch["positions"], BLOCK).diffusion
    for row, start in enumerate([4, 1, 3]):
        length = int(batch["attention_mask"][row].sum())
        for block_start in range(start, length, BLOCK):
            columns = slice(block_start, block_start + BLOCK)
            cache = tiny_model.new_kv_cache(1, block_start + BLOCK)
            positions = batch["positions"][row:row + 1]
            with torch.no_grad():
                tiny_model(batch["target_ids"][row:row + 1, :block_start], positions=positions[:, :block_start],
                           mask_rule=CausalMask(), kv_cache=cache)
                cached = tiny_model(batch["input_ids"][row:row + 1, columns], positions=positions[:, columns],
                                    mask_rule=BlockCausalMask(BLOCK), kv_cache=cache, write_cache=False)
            torch.testing.assert_close(diffusion[row:row + 1, columns], cached, atol=1e-5, rtol=1e-5)


def hand_diffusion_term(model, batch) -> float:
    """Σ over corrupted tokens of -log p / t, over the number of supervised tokens."""
    with torch.no_grad():
        logits = model.branches(batch["input_ids"], batch["target_ids"], batch["attention_mask"],
                                batch["positions"], BLOCK).diffusion.double()
    nll = -logits.log_softmax(-1).gather(-1, batch["target_ids"][..., None])[..., 0]
    corrupted = batch["noise_mask"]
    return float((nll[corrupted] / batch["p_mask"][corrupted]).sum() / batch["loss_mask"].sum())


def test_the_loss_is_alpha_times_the_diffusion_term_plus_the_ar_term(tiny_model, tokenizer):
    batch = batch_of(tokenizer, step=5)
    assert batch["noise_mask"].any()
    with torch.no_grad():
        ar = HybridLoss(block_size=BLOCK, alpha=0.0)(tiny_model, batch)["loss"].item()
        out = HybridLoss(block_size=BLOCK, alpha=0.5)(tiny_model, batch)
    diffusion = hand_diffusion_term(tiny_model, batch)
    assert out["loss"].item() == pytest.approx(0.5 * diffusion + ar, rel=1e-5)
    assert out["diffusion_loss"].item() == pytest.approx(0.5 * diffusion, rel=1e-5)
    assert out["ar_loss"].item() == pytest.approx(ar, rel=1e-5)


def test_both_terms_divide_by_the_global_counts(tiny_model, tokenizer):
    batch = batch_of(tokenizer, step=5)
    loss = HybridLoss(block_size=BLOCK, alpha=1.0)
    counts = loss.token_counts(batch)
    assert counts["num_diffusion_tokens"].item() == batch["loss_mask"].sum().item() == 4 + 8 + 4
    assert counts["num_ar_tokens"].item() == 16  # no row's first token is supervised
    with torch.no_grad():
        local = loss(tiny_model, batch)
        doubled = loss(tiny_model, batch, context=LossContext(counts={k: 2 * v for k, v in counts.items()}))
    torch.testing.assert_close(doubled["loss"], local["loss"] / 2)
    torch.testing.assert_close(doubled["diffusion_loss"], local["diffusion_loss"] / 2)


def test_evaluator_gives_the_causal_branch_exact_nll_as_arlm_computes_it(tiny_model, tokenizer):
    """The block fill is not counted: the NLL is ARLM's on the same samples (unshifted rows)."""
    evaluator = HybridEvaluator(tokenizer, block_size=BLOCK)
    collate = HybridCollator(tokenizer, block_size=BLOCK)
    batches = [collate(examples(PROMPTS[:2], TARGETS[:2])), collate(examples(PROMPTS[2:], TARGETS[2:], 2))]
    assert batches[0]["loss_mask"].sum() > 2 + 3 + 1 + 5  # there is a fill to leave out
    arlm = ARLMEvaluator(tokenizer)
    with torch.no_grad():
        sums = [evaluator.loss_metrics(tiny_model, b, loss_fn=evaluator.loss) for b in batches]
        reference = arlm.loss_metrics(tiny_model, ARLMCollator(tokenizer)(examples(PROMPTS, TARGETS)), ARLMLoss())
    assert sum(s["nll"][1] for s in sums).item() == reference["nll"][1].item() == 3 + 5 + 2
    nll = sum(s["nll"][0] for s in sums) / sum(s["nll"][1] for s in sums)
    assert nll.item() == pytest.approx((reference["nll"][0] / reference["nll"][1]).item(), rel=1e-5)
    values = evaluator.finalize({"nll": nll.item()})
    assert values["ppl"] == pytest.approx(math.exp(nll.item()))
    assert evaluator.finalize({"nll": 800.0})["ppl"] == math.inf


def test_a_sample_s_nll_from_the_clean_row_alone_is_the_joint_forward_s_causal_branch(tiny_model, tokenizer):
    """Multiple choice runs one causal forward of the clean row, not the [x_t | x_0] one."""
    evaluator = HybridEvaluator(tokenizer, block_size=BLOCK)
    batch = batch_of(tokenizer)
    with torch.no_grad():
        nll, tokens = evaluator.sample_nll(tiny_model, batch)
        joint, counted = evaluator._causal_nll(evaluator.loss.branch_logits(tiny_model, batch).causal, batch)
    torch.testing.assert_close(nll, joint.sum(1).double(), rtol=1e-5, atol=1e-5)
    assert tokens.tolist() == counted.sum(1).tolist() == [len(target) + 1 for target in TARGETS]


def test_the_diffusion_bound_repeats_and_does_not_depend_on_the_batch(tiny_model, tokenizer):
    evaluator = HybridEvaluator(tokenizer, block_size=BLOCK, num_levels=3, seed=7)
    collate = HybridCollator(tokenizer, block_size=BLOCK)
    split = [collate(examples(PROMPTS[:1], TARGETS[:1])), collate(examples(PROMPTS[1:], TARGETS[1:], 1))]
    whole = collate(examples(PROMPTS, TARGETS))
    with torch.no_grad():
        parts = [evaluator.loss_metrics(tiny_model, b, evaluator.loss)["diffusion_nll_bound"] for b in split]
        together = evaluator.loss_metrics(tiny_model, whole, evaluator.loss)["diffusion_nll_bound"]
        again = evaluator.bound_sum(tiny_model, whole)
    assert together[1].item() == 10 and together[0].item() > 0
    torch.testing.assert_close(parts[0][0] + parts[1][0], together[0], rtol=1e-6, atol=0)
    assert again.item() == together[0].item()
    bound = (together[0] / together[1]).item()
    assert evaluator.finalize({"diffusion_nll_bound": bound})["diffusion_ppl_bound"] == pytest.approx(math.exp(bound))
    off = HybridEvaluator(tokenizer, block_size=BLOCK, num_levels=0)
    with torch.no_grad():
        assert "diffusion_nll_bound" not in off.loss_metrics(tiny_model, whole, off.loss)


@pytest.mark.parametrize("build, message", [
    (lambda tok: HybridCollator(tok, block_size=0), "block_size must be >= 1"),
    (lambda tok: HybridLoss(block_size=0), "block_size must be >= 1"),
    (lambda tok: HybridLoss(block_size=4, alpha=-1.0), "alpha must be >= 0"),
    (lambda tok: HybridEvaluator(tok, block_size=4, num_levels=-1), "num_levels must be >= 0"),
])
def test_bad_options_are_named(tokenizer, build, message):
    with pytest.raises(ValueError, match=message):
        build(tokenizer)
