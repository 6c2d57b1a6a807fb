"""The verification rules on hand-made distributions: speculative sampling commits exactly the
target's distribution, whatever the drafter's; greedy acceptance keeps the agreeing prefix."""

import torch
from dflash_helpers import accept_every_draft, residual_from_the_target

from xdllm.predict.sampling import choose_tokens
from xdllm_models.dflash.acceptance import greedy_acceptance, speculative_sampling

VOCAB, ROWS = 4, 100_000


def distributions(seed):
    """The target's ``p1``, ``p2[t1]``, ``p3[t1, t2]`` (each depending on the tokens before it,
    as a target's does) and the drafter's ``q1``, ``q2`` (which see only the anchor), with zeros
    on both sides (as after top-k) and a place where the drafter puts mass the target does not."""
    generator = torch.Generator().manual_seed(seed)
    def random(*shape):
        weights = torch.rand(*shape, VOCAB, generator=generator) ** 3
        return weights / weights.sum(dim=-1, keepdim=True)
    p1, p2, p3, q1, q2 = random(), random(VOCAB), random(VOCAB, VOCAB), random(), random()
    p1[3], q1[0] = 0.0, 0.0
    return p1 / p1.sum(), p2, p3, q1 / q1.sum(), q2


def exact_round(p1, p2, p3, q1, q2):
    """The probability of each possible round: ``[t1]`` (d1 rejected), ``[t1, t2]`` (d1 kept, d2
    rejected), ``[t1, t2, t3]`` (both kept, then the target's token), as one flat vector."""
    kept1 = torch.minimum(p1, q1)
    kept2 = torch.minimum(p2, q2)  # [t1, t2]
    return torch.cat([(p1 - kept1), (kept1[:, None] * (p2 - kept2)).flatten(),
                      (kept1[:, None, None] * kept2[..., None] * p3).flatten()])


def sampled_round(rule, p1, p2, p3, q1, q2, seed=1):
    generator = torch.Generator().manual_seed(seed)
    uniform = lambda *shape: torch.rand(*shape, generator=generator)  # noqa: E731
    draft_probs = torch.stack([q1, q2]).expand(ROWS, -1, -1)
    drafts = choose_tokens(draft_probs, uniform(ROWS, 2))
    probs = torch.stack([p1.expand(ROWS, -1), p2[drafts[:, 0]], p3[drafts[:, 0], drafts[:, 1]]], dim=1)
    tokens, accepted = rule(drafts, draft_probs, probs, uniform(ROWS, 2), uniform(ROWS, 3))
    cells = torch.where(accepted == 0, tokens[:, 0],
                        torch.where(accepted == 1, VOCAB + tokens[:, 0] * VOCAB + tokens[:, 1],
                                    VOCAB + VOCAB ** 2 + (tokens[:, 0] * VOCAB + tokens[:, 1]) * VOCAB + tokens[:, 2]))
    counts = torch.bincount(cells, minlength=VOCAB + VOCAB ** 2 + VOCAB ** 3)
    return counts.double() / ROWS


def total_variation(a, b):
    return 0.5 * float((a - b).abs().sum())


BOUND = 0.015  # 100 000 rounds over 84 outcomes: the right rule is at 0.002 .. 0.004


def test_a_speculative_round_is_distributed_as_the_targets_tokens():
    for seed in range(3):
        p1, p2, p3, q1, q2 = distributions(seed)
        exact = exact_round(p1, p2, p3, q1, q2)
        assert abs(float(exact.sum()) - 1.0) < 1e-6
        assert total_variation(sampled_round(speculative_sampling, p1, p2, p3, q1, q2), exact) < BOUND


def test_the_bound_catches_broken_rules():
    p1, p2, p3, q1, q2 = distributions(0)
    exact = exact_round(p1, p2, p3, q1, q2)
    for broken in (accept_every_draft, residual_from_the_target):
        assert total_variation(sampled_round(broken, p1, p2, p3, q1, q2), exact) > 4 * BOUND, broken.__name__


def test_a_drafter_equal_to_the_target_is_always_accepted():
    p1, p2, p3, _, _ = distributions(0)
    q2 = p2[1]
    drafts = torch.tensor([[1, 2], [1, 0]])
    probs = torch.stack([p1, p2[1], p3[1, 0]]).expand(2, -1, -1).clone()
    probs[0, 2] = p3[1, 2]
    tokens, accepted = speculative_sampling(drafts, torch.stack([p1, q2]).expand(2, -1, -1), probs,
                                            torch.full((2, 2), 0.999), torch.full((2, 3), 0.5))
    assert accepted.tolist() == [2, 2] and tokens[:, :2].tolist() == drafts.tolist()


def test_greedy_acceptance_keeps_the_prefix_that_agrees_with_the_argmax():
    probs = torch.nn.functional.one_hot(torch.tensor([[2, 3, 1, 0], [1, 1, 1, 1]]), VOCAB).float()
    tokens, accepted = greedy_acceptance(torch.tensor([[2, 3, 3], [0, 1, 1]]), probs)
    assert accepted.tolist() == [2, 0]
    assert tokens.tolist() == [[2, 3, 1, 0], [1, 1, 1, 1]]
