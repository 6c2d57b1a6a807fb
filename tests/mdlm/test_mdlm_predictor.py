"""MDLM's ancestral sampler: reveal steps follow the schedule, empty steps cost no forward pass;
it and ReMDM do not depend on the batch."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "predict"))
from predict_fakes import MASK, LetterTokenizer, PositionTableModel, letter, position_table, prompt_batch  # noqa: E402

from xdllm.predict import streams  # noqa: E402
from xdllm_models.mdlm.predictor import MDLMPredictor  # noqa: E402

TOK = LetterTokenizer()


def _ancestral(max_steps: int, **options) -> MDLMPredictor:
    return MDLMPredictor(max_steps=max_steps, max_new_tokens=6, tokenizer=TOK, sampler="ancestral",
                         confidence=None, **options)


def test_log_linear_reveal_steps_are_uniform_over_the_steps():
    predictor = _ancestral(10)
    keys = streams.row_keys(0, torch.arange(4000))
    steps = predictor.reveal_steps(keys, 5)
    assert steps.min() == 0 and steps.max() == 9
    share = torch.bincount(steps.flatten(), minlength=10).double() / steps.numel()
    assert torch.allclose(share, torch.full((10,), 0.1, dtype=torch.float64), atol=0.01)  # 20k draws


def test_cosine_reveal_steps_follow_the_schedule():
    predictor = _ancestral(4, noise_schedule="cosine")
    steps = predictor.reveal_steps(streams.row_keys(1, torch.arange(5000)), 4).flatten()
    times = torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0], dtype=torch.float64)
    masked = torch.sin(0.5 * torch.pi * times)
    expected = masked[:-1] - masked[1:]  # share revealed at each step
    share = torch.bincount(steps, minlength=4).double() / steps.numel()
    assert torch.allclose(share, expected, atol=0.01)


def test_forward_passes_are_the_distinct_reveal_steps_and_every_mask_is_filled():
    table = position_table({})  # every position: all mass on 'p'
    model = PositionTableModel(table)
    predictor = _ancestral(1000, temperature=0.0)
    batch = prompt_batch([[letter("a"), letter("b")]], sample_index=torch.tensor([7]))
    out = predictor.predict(batch, model=model)
    reveal = predictor.reveal_steps(streams.row_keys(0, torch.tensor([7])), 6)[0]
    assert out["steps_taken"] == [len(reveal.unique())] == [len(model.calls)]
    assert out["steps_taken"][0] < 1000  # the empty steps were skipped
    assert (out["ids"] != MASK).all()
    assert out["ids"][0, 3:].tolist() == [letter("p")] * 6


def test_positions_are_revealed_in_the_drawn_order():
    model = PositionTableModel(position_table({}))
    predictor = _ancestral(3, temperature=0.0)
    batch = prompt_batch([[letter("a")]], sample_index=torch.tensor([3]))
    predictor.predict(batch, model=model)
    reveal = predictor.reveal_steps(streams.row_keys(0, torch.tensor([3])), 6)[0]
    groups = [set((call[0, 2:] == MASK).nonzero().flatten().tolist()) for call in model.calls]
    expected_masked = [set((reveal >= step).nonzero().flatten().tolist()) for step in sorted(reveal.unique().tolist())]
    assert groups == expected_masked


@pytest.mark.parametrize("sampler", ["ancestral", "remdm"])
def test_sampled_tokens_do_not_depend_on_the_batch(sampler):
    table = position_table({p: {letter("a"): 0.5, letter("b"): 0.3, letter("c"): 0.2} for p in range(2, 12)})
    predictor = MDLMPredictor(max_steps=50, max_new_tokens=6, tokenizer=TOK, sampler=sampler, confidence=None,
                              remdm_eta=0.2 if sampler == "remdm" else None)
    prompts = [[letter("d")], [letter("e"), letter("f"), letter("g")], [letter("h")]]
    together = predictor.predict(prompt_batch(prompts, sample_index=torch.arange(3)), model=PositionTableModel(table))
    for row, prompt in enumerate(prompts):
        alone = predictor.predict(prompt_batch([prompt], sample_index=torch.tensor([row])),
                                  model=PositionTableModel(table))
        assert alone["text"][0] == together["text"][row]
        assert alone["steps_taken"][0] == together["steps_taken"][row]
    assert len({text for text in together["text"]}) > 1  # sampling really sampled


def test_ancestral_rejects_confidence_options_and_unknown_samplers():
    with pytest.raises(ValueError, match="does not apply"):
        MDLMPredictor(max_steps=4, max_new_tokens=4, tokenizer=TOK, sampler="ancestral", confidence="top_prob")
    with pytest.raises(ValueError, match="does not apply"):
        _ancestral(4, threshold=0.9)
    with pytest.raises(ValueError, match="entropy_budget=0.5 does not apply"):
        _ancestral(4, entropy_budget=0.5)
    with pytest.raises(ValueError, match="sampler must be"):
        MDLMPredictor(max_steps=4, max_new_tokens=4, tokenizer=TOK, sampler="gibbs")


def test_confidence_sampler_is_the_shared_engine():
    table = position_table({2: {letter("a"): 0.9, letter("b"): 0.1}, 3: {letter("c"): 0.6, letter("d"): 0.4}})
    mdlm = MDLMPredictor(max_steps=2, max_new_tokens=2, tokenizer=TOK, confidence="top_prob")
    from xdllm.predict.engine import UnmaskingPredictor

    engine = UnmaskingPredictor(max_steps=2, max_new_tokens=2, tokenizer=TOK, confidence="top_prob")
    batch = prompt_batch([[letter("e")]])
    assert mdlm.predict(batch, model=PositionTableModel(table))["text"] == \
        engine.predict(batch, model=PositionTableModel(table))["text"] == ["ac"]


@pytest.mark.parametrize("max_steps", [2, 4, 5, 40])
def test_ancestral_blocks_share_the_steps_and_fill_every_mask(max_steps):
    """Each block is its own ancestral run over its share of ``max_steps``: never more passes in
    all, blocks revealed left to right, every mask filled (it used to run out of steps)."""
    model = PositionTableModel(position_table({}))
    predictor = MDLMPredictor(max_steps=max_steps, max_new_tokens=8, tokenizer=TOK, sampler="ancestral",
                              confidence=None, block_size=4, temperature=0.0)
    for index in range(12):
        model.calls.clear()
        batch = prompt_batch([[letter("a")]], sample_index=torch.tensor([index]))
        out = predictor.predict(batch, model=model)
        assert (out["ids"] != MASK).all()
        assert out["steps_taken"][0] == len(model.calls) <= max_steps
        reveal = predictor.reveal_steps(streams.row_keys(0, torch.tensor([index])), 8)[0]
        per_block, extra = divmod(max_steps, 2)
        assert reveal[:4].max() < per_block + (extra > 0) and reveal[4:].max() < per_block
        first_block_passes = len(reveal[:4].unique())
        assert all((call[0, 2:6] == MASK).any() for call in model.calls[:first_block_passes])
        assert not any((call[0, 2:6] == MASK).any() for call in model.calls[first_block_passes:])


def test_ancestral_blocks_do_not_depend_on_the_other_rows_regions():
    """Infilling regions of different lengths have different numbers of blocks, hence different
    steps per block: a row's reveal steps come from its own, not from the batch's widest region."""
    table = position_table({p: {letter("a"): 0.5, letter("b"): 0.3, letter("c"): 0.2} for p in range(1, 14)})
    predictor = MDLMPredictor(max_steps=6, tokenizer=TOK, sampler="ancestral", confidence=None, block_size=2)
    rows = [[letter("d"), MASK, MASK, letter("e")], [MASK] * 11, [letter("f"), MASK, MASK, MASK]]
    together = predictor.predict(prompt_batch(rows, side="right", infill=True, sample_index=torch.arange(3)),
                                 model=PositionTableModel(table))
    for row, prompt in enumerate(rows):
        model = PositionTableModel(table)
        alone = predictor.predict(prompt_batch([prompt], infill=True, sample_index=torch.tensor([row])), model=model)
        assert alone["text"][0] == together["text"][row]
        assert alone["steps_taken"][0] == together["steps_taken"][row] == len(model.calls) <= 6
