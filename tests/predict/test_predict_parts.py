"""The engine's parts in isolation: sampling, confidence, counts, blocks, streams, stopping."""

import copy
import math

import pytest
import torch

from xdllm.data.tokenizer import builtin_tokenizer
from xdllm.diffusion.schedules import CosineSchedule, LinearSchedule, LogLinearSchedule
from xdllm.predict import blocks, sampling, streams
from xdllm.predict.confidence import check_confidence_options, token_confidence
from xdllm.predict.sampling import choose_tokens, final_distribution, never_generated_ids
from xdllm.predict.stopping import fill_after_eos
from xdllm.predict.unmask_count import scheduled_count, select_positions


def probs_row(*values):
    return torch.tensor([values], dtype=torch.float32)


def test_top_k_top_p_and_temperature_shape_the_distribution():
    logits = torch.log(probs_row(0.1, 0.4, 0.2, 0.3))
    assert torch.allclose(final_distribution(logits, 0.0, 2, None, ()),
                          probs_row(0.0, 4 / 7, 0.0, 3 / 7))
    # nucleus 0.65: 0.4 + 0.3 = 0.7 reaches it, 0.4 alone does not
    assert torch.allclose(final_distribution(logits, 0.0, None, 0.65, ()),
                          probs_row(0.0, 4 / 7, 0.0, 3 / 7))
    assert torch.allclose(final_distribution(logits, 0.0, None, 0.3, ()),
                          probs_row(0.0, 1.0, 0.0, 0.0))
    squared = torch.tensor([0.01, 0.16, 0.04, 0.09]) / 0.30
    assert torch.allclose(final_distribution(logits, 0.5, None, None, ()), squared[None])
    assert torch.allclose(final_distribution(logits, 0.0, None, None, (1,)),
                          probs_row(1 / 6, 0.0, 2 / 6, 3 / 6))


def _nucleus_by_definition(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Which tokens top-p keeps, as defined: sort, keep while the mass before a token is below top_p."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    kept_sorted = probs.cumsum(-1) - probs < top_p
    return torch.zeros_like(kept_sorted).scatter(-1, order, kept_sorted)


def test_top_p_keeps_the_nucleus_whether_it_lies_among_the_candidates_or_past_them(monkeypatch):
    generator = torch.Generator().manual_seed(0)
    vocab = 4 * sampling.NUCLEUS_CANDIDATES
    # peaked rows (the nucleus within the top candidates) and flat ones (far past them)
    scales = torch.tensor([12.0, 6.0, 3.0, 1.0, 0.3, 0.01]).repeat(3)[:, None, None]
    logits = torch.randn(18, 2, vocab, generator=generator) * scales
    logits[..., 5] = float("-inf")  # a banned token
    for top_p in (0.5, 0.9, 0.99):
        kept = sampling._keep_top_p(logits, top_p) > float("-inf")
        assert torch.equal(kept, _nucleus_by_definition(logits, top_p)), top_p
        sizes = kept.sum(-1)
        assert (sizes < sampling.NUCLEUS_CANDIDATES).any() and (sizes > sampling.NUCLEUS_CANDIDATES).any()
        monkeypatch.setattr(sampling, "NUCLEUS_CANDIDATES", vocab)  # every row sorted in full: the same
        assert torch.equal(sampling._keep_top_p(logits, top_p), logits.masked_fill(~kept, float("-inf")))
        monkeypatch.undo()


def test_top_p_keeps_every_token_tied_with_the_last_one_it_needs():
    logits = torch.tensor([[3.0, 1.0, 1.0, 1.0, 0.0]])
    # 3.0 and two 1.0s reach 0.8 (0.69, 0.78, 0.87); the third 1.0 ties with the last one needed
    kept = final_distribution(logits, 0.0, None, 0.8, ()) > 0
    assert kept.tolist() == [[True, True, True, True, False]]


def test_never_generated_ids_are_mask_padding_and_bos_but_never_eos():
    tokenizer = builtin_tokenizer()
    assert never_generated_ids(tokenizer) == tuple(sorted(
        {tokenizer.pad_token_id, tokenizer.mask_token_id, tokenizer.bos_token_id}))
    shared = copy.copy(tokenizer)
    shared.pad_token_id = shared.bos_token_id = shared.eos_token_id  # outputs end with it: it stays
    assert never_generated_ids(shared) == (shared.mask_token_id,)


def test_argmax_and_inverse_cdf_choice():
    probs = probs_row(0.0, 0.5, 0.0, 0.5)
    assert choose_tokens(probs, None).tolist() == [1]
    draws = torch.tensor([0.0, 0.49, 0.5, 0.999])
    picked = choose_tokens(probs.expand(4, -1), draws)
    assert picked.tolist() == [1, 1, 3, 3]


def test_inverse_cdf_choice_counts_the_cdf_entries_below_the_draw():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 300, generator=generator)
    logits[..., ::7] = float("-inf")  # zero-probability tokens, never drawn
    probs = logits.softmax(-1)
    draws = torch.rand(3, 5, generator=generator)
    draws[0, 0], draws[0, 1] = 0.0, 1.0 - 1e-7
    cdf = probs.cumsum(-1)
    expected = (cdf <= (draws * cdf[..., -1])[..., None]).sum(-1).clamp(max=299)
    picked = choose_tokens(probs, draws)
    assert torch.equal(picked, expected)
    assert not (picked % 7 == 0).any()


def test_sampling_matches_the_distribution():
    probs = probs_row(0.1, 0.0, 0.6, 0.3).expand(20000, -1)
    keys = streams.row_keys(5, torch.arange(1))
    draws = streams.uniforms(keys, 0, streams.Purpose.TOKEN, 20000)[0]
    counts = torch.bincount(choose_tokens(probs, draws), minlength=4).float() / 20000
    assert counts[1] == 0
    assert torch.allclose(counts, torch.tensor([0.1, 0.0, 0.6, 0.3]), atol=0.015)


def test_confidence_scores_by_hand():
    probs = torch.tensor([[0.6, 0.1, 0.3, 0.0], [0.25, 0.25, 0.25, 0.25]])
    argmax = torch.tensor([0, 0])
    sampled = torch.tensor([2, 3])
    assert torch.allclose(token_confidence("top_prob", probs, argmax), torch.tensor([0.6, 0.25]))
    assert torch.allclose(token_confidence("top_prob", probs, sampled), torch.tensor([0.3, 0.25]))
    assert torch.allclose(token_confidence("prob_diff", probs, argmax), torch.tensor([0.3, 0.0]))
    assert torch.allclose(token_confidence("prob_diff", probs, sampled), torch.tensor([-0.3, 0.0]))
    h0 = -(0.6 * math.log(0.6) + 0.1 * math.log(0.1) + 0.3 * math.log(0.3))
    assert torch.allclose(token_confidence("entropy", probs, sampled),
                          torch.tensor([-h0, -math.log(4)]))


def test_threshold_ranges_per_mode():
    check_confidence_options("entropy", -2.0)
    check_confidence_options("prob_diff", -0.5)
    for mode, bad in (("entropy", 0.1), ("top_prob", -0.1), ("prob_diff", 1.1)):
        with pytest.raises(ValueError, match="outside"):
            check_confidence_options(mode, bad)


def simulate(n, max_steps, schedule):
    """Counts per step for one block of n masks."""
    sizes = []
    for step in range(max_steps):
        left = n - sum(sizes)
        if left == 0:
            break
        k = scheduled_count(torch.tensor([left]), torch.tensor([max_steps - step]),
                            torch.tensor([max_steps]), schedule)
        sizes.append(int(k))
    return sizes


@pytest.mark.parametrize("schedule", [None, LinearSchedule(), CosineSchedule(),
                                      LogLinearSchedule()])
@pytest.mark.parametrize("n, max_steps", [(10, 4), (3, 7), (1, 1), (64, 64), (64, 1), (5, 5)])
def test_schedules_finish_exactly_without_empty_steps(schedule, n, max_steps):
    sizes = simulate(n, max_steps, schedule)
    assert sum(sizes) == n and min(sizes) >= 1 and len(sizes) <= max_steps


def test_default_count_is_an_even_split():
    assert simulate(10, 4, None) == [3, 3, 2, 2] == simulate(10, 4, LinearSchedule())
    assert simulate(3, 7, None) == [1, 1, 1]
    assert simulate(8, 4, CosineSchedule()) == [1, 2, 3, 2]


def test_select_positions_ranks_candidates_and_adds_threshold_passes():
    scores = torch.tensor([[0.9, 0.2, 0.8, 0.8, 0.1]])
    candidates = torch.tensor([[False, True, True, True, True]])
    picked = select_positions(scores, candidates, torch.tensor([2]), None)
    assert picked.tolist() == [[False, False, True, True, False]]
    picked = select_positions(scores, candidates, torch.tensor([1]), 0.15)
    assert picked.tolist() == [[False, True, True, True, False]]
    picked = select_positions(scores, candidates, torch.tensor([1]), 0.95)
    assert picked.tolist() == [[False, False, True, False, False]]


def test_block_deadlines_and_current_block():
    n_blocks = torch.tensor([3, 3, 1])
    assert blocks.block_deadline(torch.tensor([0, 2, 0]), n_blocks, 7).tolist() == [3, 7, 7]
    assert blocks.block_deadline(torch.tensor([0, 1, 2]), torch.tensor([3, 3, 3]), 4).tolist() \
        == [2, 3, 4]
    masked = torch.tensor([[False, False, True, True, True], [True] * 5])
    block, inside = blocks.current_block(masked, 2)
    assert block.tolist() == [1, 0]
    assert inside.tolist() == [[False, False, True, True, False], [True, True, False, False, False]]
    assert blocks.count_blocks(torch.tensor([5, 4, 0]), 2).tolist() == [3, 2, 1]


def test_streams_depend_only_on_sample_step_purpose_and_offset():
    keys = streams.row_keys(3, torch.tensor([7, 8, 7]))
    wide = streams.uniforms(keys, 2, streams.Purpose.TOKEN, 6)
    assert torch.equal(wide[0], wide[2]) and not torch.equal(wide[0], wide[1])
    assert torch.equal(streams.uniforms(keys[1:2], 2, streams.Purpose.TOKEN, 3), wide[1:2, :3])
    assert not torch.equal(streams.uniforms(keys, 3, streams.Purpose.TOKEN, 6), wide)
    assert not torch.equal(streams.uniforms(keys, 2, streams.Purpose.ORDER, 6), wide)
    assert not torch.equal(streams.uniforms(streams.row_keys(4, torch.tensor([7, 8, 7])), 2,
                                            streams.Purpose.TOKEN, 6), wide)
    many = streams.uniforms(streams.row_keys(0, torch.arange(100)), 0, streams.Purpose.ORDER, 100)
    assert 0.0 <= many.min() and many.max() < 1.0 and abs(many.mean().item() - 0.5) < 0.01


def test_fill_after_eos_only_once_nothing_is_masked_before_it():
    eos, mask, pad = 3, 1, 0
    window = torch.tensor([[5, 3, 1, 6, 3], [1, 3, 1, 6, 0], [5, 6, 7, 8, 9]])
    valid = torch.tensor([[True] * 5, [True] * 5, [True] * 4 + [False]])
    filled_ids, filled = fill_after_eos(window, valid, eos, mask, pad)
    assert filled_ids.tolist() == [[5, 3, 0, 0, 0], [1, 3, 1, 6, 0], [5, 6, 7, 8, 9]]
    assert filled.tolist() == [[False, False, True, True, True], [False] * 5, [False] * 5]


def test_a_predictor_prints_its_options():
    from xdllm_models.bd3lm.predictor import BD3LMPredictor
    from xdllm_models.mdlm.predictor import MDLMPredictor
    from xdllm_models.mlm.predictor import MLMPredictor

    shown = repr(MLMPredictor(max_steps=9, confidence="top_prob", threshold=0.9))
    assert shown.startswith("MLMPredictor(max_steps=9, max_new_tokens=None,") and "threshold=0.9" in shown
    assert repr(MDLMPredictor(max_steps=4, sampler="ancestral", confidence=None)).startswith(
        "MDLMPredictor(sampler='ancestral', remdm_schedule=None, remdm_eta=None, remdm_t_on=None, "
        "remdm_t_off=None, remdm_alpha_on=None, max_steps=4,")  # its own options, then its base's
    shown = repr(BD3LMPredictor(max_new_tokens=8, block_size=4))
    assert "steps_per_block=4" in shown and "max_steps" not in shown  # what it is built with
