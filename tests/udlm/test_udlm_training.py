"""UDLM training: one seeded canvas block per example with uniform random-token noise, a forward
whose canvas sees exactly what cached block decoding sees, and the two-term loss over global counts."""

import pytest
import torch
import torch.nn.functional as F
from udlm_helpers import examples

from xdllm.evaluate import MetricTotals
from xdllm.evaluate.evaluation_loss import EvaluationLoss
from xdllm.interfaces import LossContext
from xdllm.nn import BlockCausalMask, CausalMask
from xdllm_models.udlm.collator import UDLMCollator
from xdllm_models.udlm.loss import UDLMLoss
from xdllm_models.udlm.metrics import UDLMEvaluator

PROMPTS = [[4, 5, 6], [7], [8, 9, 10, 11, 12]]
TARGETS = [[13, 14, 15, 16, 17, 18], [4, 5], [6, 7, 8, 9, 10, 11, 12, 13, 14]]


def test_canvas_is_one_response_block_with_uniform_noise_on_it(tokenizer):
    batch = UDLMCollator(tokenizer, block_size=4, seed=3)(examples(PROMPTS, TARGETS, step=5))
    clean, supervised = batch["input_ids"], batch["loss_mask"] != 0
    start = supervised.int().argmax(1)
    n_blocks = supervised.sum(1) // 4
    assert n_blocks.tolist() == [2, 1, 3]  # target + eos, EOS-filled to whole blocks
    assert bool(((batch["canvas_block"] >= 0) & (batch["canvas_block"] < n_blocks)).all())
    columns = (start + 4 * batch["canvas_block"])[:, None] + torch.arange(4)
    assert torch.equal(batch["canvas_target_ids"], clean.gather(1, columns))
    assert torch.equal(batch["canvas_positions"], batch["positions"].gather(1, columns))
    assert bool((batch["canvas_positions"][:, 0] % 4 == 0).all())  # the canvas is a whole block
    noisy, noise = batch["canvas_input_ids"], batch["canvas_noise_mask"]
    assert torch.equal(noisy[~noise], batch["canvas_target_ids"][~noise])
    assert bool(((noisy >= 0) & (noisy < tokenizer.vocab_size)).all())
    assert torch.equal(batch["canvas_p_mask"], torch.ones(3, 4))


def test_block_choice_and_noise_depend_only_on_seed_step_and_sample(tokenizer):
    collate = UDLMCollator(tokenizer, block_size=2, seed=7)
    alone = collate(examples(PROMPTS[2:], TARGETS[2:], first_index=2, step=4))
    together = collate(examples(PROMPTS, TARGETS, step=4))
    for key in ("canvas_block", "canvas_input_ids", "canvas_noise_mask"):
        assert torch.equal(alone[key][0], together[key][2]), key
    # over many samples and steps every block gets chosen, and the choice changes with the step
    many = [collate(examples([[4]] * 64, [[5, 6, 7, 8, 9]] * 64, step=step)) for step in (0, 1)]
    for batch in many:
        assert set(batch["canvas_block"].tolist()) == {0, 1, 2}
    assert not torch.equal(many[0]["canvas_block"], many[1]["canvas_block"])


def test_noise_levels_cover_clean_and_fully_replaced_canvases(tokenizer):
    batch = UDLMCollator(tokenizer, block_size=8, seed=0)(examples([[4]] * 256, [[5] * 7] * 256))
    fraction = batch["canvas_noise_mask"].float().mean(1)
    assert fraction.min() < 0.2 and fraction.max() > 0.8  # one level per example, U(eps, 1)


def test_canvas_logits_equal_cached_block_decoding(tokenizer, tiny_model):
    """The training forward's canvas logits are what decoding computes for that block: the
    encoder's prefix in a causal KV cache, the canvas read against it block-causally."""
    batch = UDLMCollator(tokenizer, block_size=4, seed=1)(examples(PROMPTS, TARGETS, step=2))
    with torch.no_grad():
        logits = tiny_model.canvas_and_encoder(batch["canvas_input_ids"], batch["canvas_positions"],
                                               batch["input_ids"], batch["attention_mask"], batch["positions"], 4)
        for row in range(3):
            start = int((batch["loss_mask"][row] != 0).int().argmax()) + 4 * int(batch["canvas_block"][row])
            cache = tiny_model.new_kv_cache(1, start + 4)
            tiny_model(batch["input_ids"][row:row + 1, :start], positions=batch["positions"][row:row + 1, :start],
                       mask_rule=CausalMask(), kv_cache=cache)
            decoded = tiny_model(batch["canvas_input_ids"][row:row + 1],
                                 positions=batch["canvas_positions"][row:row + 1], mask_rule=BlockCausalMask(4),
                                 kv_cache=cache, write_cache=False)
            torch.testing.assert_close(logits.canvas[row:row + 1], decoded, atol=1e-5, rtol=1e-5)
            # the encoder is causal and never sees the canvas
            real = batch["attention_mask"][row]
            alone = tiny_model(batch["input_ids"][row:row + 1, real], positions=batch["positions"][row:row + 1, real])
            torch.testing.assert_close(logits.encoder[row:row + 1, real], alone, atol=1e-5, rtol=1e-5)


def test_loss_is_flat_canvas_ce_plus_weighted_encoder_term_over_global_counts(tokenizer, tiny_model):
    batch = UDLMCollator(tokenizer, block_size=4, seed=1)(examples(PROMPTS, TARGETS, step=2))
    loss = UDLMLoss(block_size=4, encoder_weight=0.5)
    logits = loss.logits(tiny_model, batch)
    canvas_nll = F.cross_entropy(logits.canvas.transpose(1, 2), batch["canvas_target_ids"], reduction="none")
    encoder_nll = F.cross_entropy(logits.encoder[:, :-1].transpose(1, 2), batch["input_ids"][:, 1:],
                                  reduction="none")
    real = batch["attention_mask"]
    pairs = real[:, :-1] & real[:, 1:]
    counts = loss.token_counts(batch)
    assert counts["num_canvas_tokens"] == 12 and counts["num_encoder_pairs"] == int(pairs.sum())
    local = loss(tiny_model, batch)
    expected_diffusion = canvas_nll.sum() / 12  # every supervised canvas position, corrupted or not
    expected_encoder = encoder_nll[pairs].sum() / pairs.sum()
    torch.testing.assert_close(local["diffusion_loss"], expected_diffusion)
    torch.testing.assert_close(local["encoder_loss"], 0.5 * expected_encoder)  # the loss's share
    torch.testing.assert_close(local["loss"], expected_diffusion + 0.5 * expected_encoder)
    doubled = {name: 2 * count for name, count in counts.items()}
    global_terms = loss(tiny_model, batch, context=LossContext(counts=doubled))
    torch.testing.assert_close(global_terms["loss"], local["loss"] / 2)


def test_loss_trains_both_roles(tokenizer):
    from udlm_helpers import tiny_udlm

    model = tiny_udlm(tokenizer.vocab_size).train()
    batch = UDLMCollator(tokenizer, block_size=4, seed=1)(examples(PROMPTS, TARGETS, step=2))
    loss = UDLMLoss(block_size=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = loss(model, batch)
    for _ in range(30):
        optimizer.zero_grad()
        loss(model, batch)["loss"].backward()
        optimizer.step()
    last = loss(model, batch)
    assert last["diffusion_loss"] < 0.5 * first["diffusion_loss"]
    assert last["encoder_loss"] < 0.5 * first["encoder_loss"]


def test_the_evaluator_adds_up_the_exact_shares_into_the_training_loss(tokenizer, tiny_model):
    batch = UDLMCollator(tokenizer, block_size=4, seed=1)(examples(PROMPTS, TARGETS, step=2))
    loss = EvaluationLoss(UDLMLoss(block_size=4, encoder_weight=0.5))
    totals = MetricTotals()
    totals.add(UDLMEvaluator(tokenizer).loss_metrics(tiny_model, batch, loss))
    values = UDLMEvaluator(tokenizer).finalize(totals.means())
    local = loss(tiny_model, batch)
    assert values["loss"] == pytest.approx(local["loss"].item(), rel=1e-6)
    assert values["encoder_loss"] == pytest.approx(local["encoder_loss"].item(), rel=1e-6)
    assert values["diffusion_loss"] + values["encoder_loss"] == pytest.approx(values["loss"], rel=1e-12)
