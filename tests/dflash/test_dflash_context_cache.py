"""The drafter's context cache: the same drafts as recomputing the context every round, with each
context slot projected once (again only after a rewind)."""

import pytest
import torch
from dflash_helpers import drafter, prompt_batch, sharp_target, tokenizer

from xdllm_models.dflash.context_cache import DrafterContextCache
from xdllm_models.dflash.mask import block_tokens, context_tokens
from xdllm_models.dflash.predictor import SpeculativePredictor

PROMPTS = [[5, 6, 7, 8], [9], [10, 11, 12, 5, 6, 7], [8, 8]]


@pytest.fixture(scope="module")
def target(target_run):
    return sharp_target(target_run)


def projected_widths(model):
    """The context widths the drafter projects, one entry per projection, as they happen."""
    widths = []
    model.context_projection.register_forward_hook(lambda module, inputs, output: widths.append(inputs[0].shape[1]))
    return widths


@pytest.mark.parametrize("block_size, options", [(2, {}), (4, {}), (8, {}), (4, dict(temperature=1.0, top_k=8))])
def test_the_cache_changes_no_output_and_projects_each_slot_once(target_run, target, block_size, options):
    outputs, widths = {}, {}
    for cached in (False, True):
        model = drafter(target_run, block_size, seed=6)
        widths[cached] = projected_widths(model)
        predictor = SpeculativePredictor(14, tokenizer(), drafter_cache=cached, **options)
        outputs[cached] = predictor.predict(prompt_batch(PROMPTS), model=model, frozen={"target": target})
    assert torch.equal(outputs[True]["ids"], outputs[False]["ids"])
    assert outputs[True]["target_passes"] == outputs[False]["target_passes"]
    contexts = widths[False]  # the whole context at every draft
    assert len(contexts) > 2 and widths[True] == [contexts[0]] + [b - a for a, b in zip(contexts, contexts[1:])]


def test_a_rewound_cache_recomputes_the_rewritten_slots(target_run):
    model = drafter(target_run, 4, seed=6)
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(2, 10, model.context_projection.in_features, generator=generator)
    rewritten = features.clone()
    rewritten[:, 6:] = torch.randn(2, 4, features.shape[-1], generator=generator)
    document = torch.zeros(2, 10, dtype=torch.long)
    context = context_tokens(document, torch.arange(10).expand(2, -1))
    queries = block_tokens(torch.full((2, 1), 10), 4)
    block = torch.randn(2, 4, model.config.d_model, generator=generator)
    cache = DrafterContextCache(16)
    for width, rows in ((6, features), (8, features)):  # two drafts over a growing context
        cut = context._replace(**{name: part[:, :width] for name, part in context._asdict().items()})
        model(block, queries, rows[:, :width], cut, cache)
    cache.rewind(6)  # a verification rewrote slots 6 .. 9
    assert cache.length == 6
    with_cache = model(block, queries, rewritten, context, cache)
    assert cache.length == 10
    assert torch.allclose(with_cache, model(block, queries, rewritten, context), atol=1e-5)
    assert not torch.allclose(with_cache, model(block, queries, features, context), atol=1e-3)


def test_the_cache_refuses_a_shorter_context_and_too_many_slots(target_run):
    model = drafter(target_run, 4)
    features = torch.zeros(1, 5, model.context_projection.in_features)
    context = context_tokens(torch.zeros(1, 5, dtype=torch.long), torch.arange(5)[None])
    queries = block_tokens(torch.full((1, 1), 5), 4)
    block = torch.zeros(1, 4, model.config.d_model)
    cache = DrafterContextCache(8)
    model(block, queries, features, context, cache)
    shorter = context._replace(**{name: part[:, :3] for name, part in context._asdict().items()})
    with pytest.raises(ValueError, match="holds 5 slots but the context has 3: rewind it"):
        model(block, queries, features[:, :3], shorter, cache)
    with pytest.raises(ValueError, match="9 context slots exceed its capacity of 8"):
        cache.extend(model.context_keys_values(torch.zeros(1, 4, features.shape[-1]), torch.arange(4)[None]))
    with pytest.raises(ValueError, match="capacity must be >= 1, got 0"):
        DrafterContextCache(0)
