"""DFlash training: anchors from the response, block labels, the fused loss equal to the plain
one, gradients only into the drafter, the drafter's sizes read from the target."""

import pytest
import torch
from dflash_helpers import drafter, examples, sharp_target, tokenizer

from xdllm.interfaces import LossContext
from xdllm_models.dflash.collator import DFlashCollator
from xdllm_models.dflash.loss import COUNT_KEY, DFlashLoss, block_labels, position_metric
from xdllm_models.dflash.metrics import DFlashEvaluator
from xdllm_models.dflash.model import DFlashDrafter
from xdllm_models.dflash.target import evenly_spread_layers, target_features

PROMPTS = [[5, 6, 7], [8], [9, 10, 11, 12, 13]]
TARGETS = [[4, 5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18, 19]]


def batch(num_anchors=3, step=0, first_index=0):
    return DFlashCollator(tokenizer(), num_anchors=num_anchors, seed=7)(
        examples(PROMPTS, TARGETS, first_index, step))


def test_anchors_are_distinct_sorted_response_columns_with_a_token_after_them():
    out = batch(num_anchors=4)
    for row, (prompt, target) in enumerate(zip(PROMPTS, TARGETS)):
        first, last = 1 + len(prompt), len(prompt) + len(target)  # response: target + eos; last = eos - 1
        picked = out["anchor_positions"][row][out["anchor_valid"][row]].tolist()
        assert len(picked) == min(4, last - first + 1)
        assert picked == sorted(set(picked)) and all(first <= a <= last for a in picked)
    assert out["anchor_valid"][1].tolist() == [True, True, False, False]  # a response of 3: two anchors


def test_anchors_depend_on_seed_step_and_sample_only():
    whole = batch(step=3)
    alone = DFlashCollator(tokenizer(), num_anchors=3, seed=7)(examples(PROMPTS[2:], TARGETS[2:], 2, 3))
    assert torch.equal(alone["anchor_positions"][0], whole["anchor_positions"][2])
    assert not torch.equal(batch(step=4)["anchor_positions"], whole["anchor_positions"])


def test_block_labels_are_the_tokens_after_each_anchor_inside_the_row():
    out = batch(num_anchors=2)
    labels, valid = block_labels(out, 4)
    ids, real = out["input_ids"], out["attention_mask"]
    for row in range(3):
        for block, (anchor, used) in enumerate(zip(out["anchor_positions"][row].tolist(),
                                                   out["anchor_valid"][row].tolist())):
            for offset in range(1, 4):
                column = anchor + offset
                inside = used and column < ids.shape[1] and bool(real[row, column])
                assert bool(valid[row, block * 3 + offset - 1]) == inside
                if inside:
                    assert labels[row, block * 3 + offset - 1] == ids[row, column]


@pytest.fixture(scope="module")
def target(target_run):
    return sharp_target(target_run)


def test_the_fused_loss_equals_the_plain_loss_with_its_gradients(target_run, target):
    data = batch()
    context = LossContext(frozen={"target": target})
    results = []
    for fused in (True, False):
        model = drafter(target_run, block_size=4).train()
        loss = DFlashLoss(tokenizer().mask_token_id, block_size=4, use_fused_linear_ce=fused, chunk_size=5)
        out = loss(model, data, context)
        out["loss"].backward()
        results.append((out, [p.grad.clone() for p in model.parameters()]))
    (fused_out, fused_grads), (plain_out, plain_grads) = results
    for name in plain_out:
        assert torch.allclose(fused_out[name], plain_out[name], atol=1e-5), name
    for fused_grad, plain_grad in zip(fused_grads, plain_grads):
        assert torch.allclose(fused_grad, plain_grad, atol=1e-5)
    assert all(p.grad is None for p in target.parameters())


def test_the_loss_uses_the_global_count_and_the_fused_path_from_large_vocabularies(target_run, target):
    data = batch()
    loss = DFlashLoss(tokenizer().mask_token_id, block_size=4)
    count = loss.token_counts(data)[COUNT_KEY]
    assert int(count) == int(block_labels(data, 4)[1].sum())
    model = drafter(target_run, block_size=4)
    local = loss(model, data, LossContext(frozen={"target": target}))["loss"]
    doubled = loss(model, data, LossContext(counts={COUNT_KEY: 2 * count}, frozen={"target": target}))["loss"]
    assert torch.allclose(doubled, local / 2)
    assert not loss.fused(46) and loss.fused(32768)


def test_a_drafter_built_for_another_block_size_is_refused(target_run, target):
    loss = DFlashLoss(tokenizer().mask_token_id, block_size=4)
    with pytest.raises(ValueError, match="block_size=4 but the drafter was built for 8"):
        loss(drafter(target_run, block_size=8), batch(), LossContext(frozen={"target": target}))


def test_the_drafter_has_the_targets_width_and_reads_evenly_spread_layers(target_run):
    model = DFlashDrafter(str(target_run), block_size=4, n_heads=2, target_layers=2)
    assert model.config.d_model == 32 and model.target_layers == (0, 2)
    assert evenly_spread_layers(3, 5) == (0, 1, 2) and evenly_spread_layers(8, 3) == (0, 4, 7)
    with pytest.raises(ValueError, match="d_model=64 differs from the target's 32"):
        DFlashDrafter(str(target_run), d_model=64, n_heads=2)
    with pytest.raises(ValueError, match="frozen.target=<arlm run directory or checkpoint>"):
        DFlashDrafter("")


def test_target_features_are_the_causal_forwards_hidden_states_without_logits(target):
    ids = torch.tensor([[2, 5, 6, 7, 8, 0], [2, 9, 10, 0, 0, 0]])
    real = ids != 0
    positions = torch.arange(6)[None].expand(2, 6)
    features = target_features(target, (0, 2), ids, real, positions)
    out = target(ids, attention_mask=real, positions=positions, output_hidden_states=(0, 2))
    assert torch.allclose(features, torch.cat(out.hidden_states, dim=-1), atol=1e-6)
    later = ids.clone()
    later[0, 4] = 11  # causal: the features before column 4 do not change
    assert torch.equal(target_features(target, (0, 2), later, real, positions)[0, :4], features[0, :4])


def test_the_family_config_picks_best_ckpt_by_the_drafter_loss_and_an_experiment_can_override_it():
    from xdllm.config.compose import compose_config

    family = compose_config("train", ["model=dflash"])
    assert (family.checkpoint.monitor, family.checkpoint.mode) == ("val/loss", "min")
    experiment = compose_config("train", ["experiment=sort_dflash"])
    assert (experiment.checkpoint.monitor, experiment.checkpoint.mode) == ("val/acceptance_length", "max")
    assert compose_config("train", ["model=mdlm"]).checkpoint.monitor is None  # train.yaml's default


def test_per_position_metric_names_sort_by_position():
    assert [position_metric(k, 8) for k in (1, 7)] == ["draft_acc_pos_1", "draft_acc_pos_7"]
    names = [position_metric(k, 16) for k in range(1, 16)]
    assert names[:2] == ["draft_acc_pos_01", "draft_acc_pos_02"] and sorted(names) == names
    values = {name: float(k) / 16 for k, name in enumerate(names, start=1)}
    curve = DFlashEvaluator(tokenizer(), block_size=16).curves(values)["draft_acc_by_position"]
    assert curve == [(float(k), k / 16) for k in range(1, 16)]
