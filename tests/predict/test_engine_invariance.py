"""Batch / padding invariance, reproducible sampling, canvases, history and bad input."""

import pytest
import torch
from predict_fakes import (
    BOS,
    EOS,
    MASK,
    PAD,
    VOCAB,
    LetterTokenizer,
    PositionTableModel,
    RecordingHistory,
    letter,
    prompt_batch,
)

from xdllm.history import HistoryTopKPlugin
from xdllm.predict import UnmaskingPredictor
from xdllm.predict.sampling import never_generated_ids

PROMPTS = [[letter("a")], [letter("b"), letter("c"), letter("d")], []]


def random_model(seed=0):
    table = torch.randn(40, VOCAB, generator=torch.Generator().manual_seed(seed)) * 2.0
    return PositionTableModel(table)


def outputs(prediction):
    """Each row's output region, the thing that must not depend on the batch."""
    return [prediction["ids"][row, start:start + 6].tolist()
            for row, start in enumerate(prediction["output_start_idx"].tolist())]


SAMPLING = dict(max_steps=3, max_new_tokens=6, temperature=1.0, top_p=0.9, confidence=None)


@pytest.mark.parametrize("options", [
    SAMPLING, dict(max_steps=4, max_new_tokens=6, temperature=0.7, top_k=5,
                   confidence="prob_diff", threshold=0.3, block_size=3, stop_at_eos=True)])
def test_a_sample_does_not_depend_on_its_batch_row_or_padding(options):
    predictor = UnmaskingPredictor(tokenizer=LetterTokenizer(), seed=7, **options)
    model = random_model()
    together = predictor.predict(prompt_batch(PROMPTS, "left", sample_index=torch.tensor([10, 11, 12])),
                                 model=model)
    right = predictor.predict(prompt_batch(PROMPTS, "right", sample_index=torch.tensor([10, 11, 12])),
                              model=model)
    reordered = predictor.predict(
        prompt_batch(PROMPTS[::-1], "left", sample_index=torch.tensor([12, 11, 10])), model=model)
    alone = [predictor.predict(prompt_batch([p], sample_index=torch.tensor([10 + i])), model=model)
             for i, p in enumerate(PROMPTS)]
    expected = outputs(together)
    assert outputs(right) == expected
    assert outputs(reordered)[::-1] == expected
    assert [outputs(a)[0] for a in alone] == expected
    assert together["text"] == right["text"] == reordered["text"][::-1]
    assert together["steps_taken"] == [a["steps_taken"][0] for a in alone]


def test_sampling_is_seeded():
    model = random_model()
    batch = prompt_batch(PROMPTS, sample_index=torch.tensor([0, 1, 2]))
    runs = {seed: outputs(UnmaskingPredictor(tokenizer=LetterTokenizer(), seed=seed, **SAMPLING)
                          .predict(batch, model=model)) for seed in (0, 0, 1)}
    first = UnmaskingPredictor(tokenizer=LetterTokenizer(), seed=0, **SAMPLING).predict(
        batch, model=model)
    assert outputs(first) == runs[0]
    assert runs[0] != runs[1]
    greedy = UnmaskingPredictor(max_steps=3, max_new_tokens=6, tokenizer=LetterTokenizer(),
                                confidence="top_prob").predict(batch, model=model)
    expected = model.table.clone()
    expected[:, list(never_generated_ids(LetterTokenizer()))] = float("-inf")
    starts = greedy["output_start_idx"].tolist()
    n_real = [1 + len(p) for p in PROMPTS]
    assert outputs(greedy) == [expected[n:n + 6].argmax(-1).tolist() for n in n_real]
    assert starts == [4, 4, 4]


def test_unconditional_and_empty_prompts():
    tok = LetterTokenizer()
    model = random_model()
    predictor = UnmaskingPredictor(max_steps=2, max_new_tokens=3, tokenizer=tok,
                                   confidence="top_prob")
    bos_only = predictor.predict(prompt_batch([[], []]), model=model)
    empty = {"input_ids": torch.full((2, 1), PAD), "attention_mask": torch.zeros(2, 1, dtype=torch.bool)}
    nothing = predictor.predict(empty, model=model)
    assert bos_only["ids"][:, 0].tolist() == [BOS, BOS]
    assert bos_only["output_start_idx"].tolist() == [1, 1]
    assert nothing["output_start_idx"].tolist() == [0, 0]
    table = model.table.clone()
    table[:, MASK] = float("-inf")
    assert nothing["ids"][:, :3].tolist() == [table[:3].argmax(-1).tolist()] * 2
    assert nothing["ids"][:, 3].tolist() == [PAD, PAD]
    assert bos_only["steps_taken"] == nothing["steps_taken"] == [2, 2]


def test_history_gets_every_step_on_the_output_window():
    model = random_model()
    history = RecordingHistory(k=5)
    predictor = UnmaskingPredictor(max_steps=3, max_new_tokens=6, tokenizer=LetterTokenizer(),
                                   confidence="entropy", top_k=4)
    batch = prompt_batch(PROMPTS, "right")
    prediction = predictor.predict(batch, model=model, history=history)
    canvas, start = history.begun
    assert (canvas == MASK).sum().item() == 18 and start.tolist() == [2, 4, 1]
    assert [s.step for s in history.steps] == [0, 1, 2]
    assert history.ended is prediction
    last = history.steps[-1]
    assert torch.equal(last.output_start, start) and bool(last.window_valid.all())
    assert last.window_valid.shape == (3, 6)  # offset o of row b is canvas column start[b] + o
    committed = torch.stack([s.committed for s in history.steps]).sum(0)
    assert torch.equal(committed, torch.ones(3, 6, dtype=torch.long))  # each offset once
    assert torch.equal(last.canvas, prediction["ids"])
    probs = last.topk_probs  # top-5 of a distribution restricted to 4 tokens: all of its mass
    assert torch.allclose(probs.sum(-1), torch.ones(3, 6))
    assert ((probs > 0).sum(-1) == 4).all()
    assert bool((probs[..., :-1] >= probs[..., 1:]).all())
    entropy = -torch.special.entr(probs).sum(-1)
    assert torch.allclose(last.confidence, entropy)


def test_infill_flag_and_detection():
    tok = LetterTokenizer()
    model = random_model()
    ids = torch.tensor([[PAD, BOS, letter("a"), MASK, letter("b"), MASK],
                        [BOS, MASK, letter("c"), PAD, PAD, PAD]])
    attention = ids != PAD
    predictor = UnmaskingPredictor(max_steps=2, tokenizer=tok, confidence="top_prob")
    detected = predictor.predict({"input_ids": ids, "attention_mask": attention}, model=model)
    flagged = UnmaskingPredictor(max_steps=2, max_new_tokens=5, tokenizer=tok,
                                 confidence="top_prob").predict(
        {"input_ids": ids, "attention_mask": attention, "infill": True}, model=model)
    assert torch.equal(detected["ids"], flagged["ids"])
    assert detected["output_start_idx"].tolist() == [3, 1]
    table = model.table.clone()
    table[:, MASK] = float("-inf")
    guess = table.argmax(-1)
    assert detected["ids"][0].tolist() == [PAD, BOS, letter("a"), guess[2], letter("b"), guess[4]]
    assert detected["ids"][1].tolist() == [BOS, guess[1], letter("c"), PAD, PAD, PAD]
    assert detected["steps_taken"] == [2, 1]


def test_text_is_cut_at_eos_and_honours_skip_special_tokens():
    table = torch.full((10, VOCAB), -5.0)
    for position, token in enumerate([BOS, letter("a"), letter("b"), EOS, letter("c")]):
        table[position, token] = 5.0
    model = PositionTableModel(table)
    batch = prompt_batch([[letter("a")]])
    for skip, text in ((True, "b"), (False, "b<eos>")):
        predictor = UnmaskingPredictor(max_steps=3, max_new_tokens=3, tokenizer=LetterTokenizer(),
                                       skip_special_tokens=skip)
        assert predictor.predict(batch, model=model)["text"] == [text]


@pytest.mark.parametrize("options, message", [
    (dict(max_steps=0), "max_steps"),
    (dict(max_steps=2, confidence="entropy", threshold=0.5), "range of the 'entropy'"),
    (dict(max_steps=2, confidence="top_prob", threshold=1.5), "threshold"),
    (dict(max_steps=2, threshold=0.5), "needs a confidence"),
    (dict(max_steps=2, confidence="margin"), "confidence must be one of"),
    (dict(max_steps=2, top_p=0.0), "top_p"),
    (dict(max_steps=2, top_k=0), "top_k"),
    (dict(max_steps=2, temperature=-1.0), "temperature"),
    (dict(max_steps=2, block_size=0), "block_size"),
    (dict(max_steps=2, noise_schedule="quadratic"), "unknown noise schedule"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        UnmaskingPredictor(tokenizer=LetterTokenizer(), **options)


def test_bad_batches_are_named():
    tok = LetterTokenizer()
    model = random_model()
    predictor = UnmaskingPredictor(max_steps=2, max_new_tokens=2, tokenizer=tok)
    holes = {"input_ids": torch.tensor([[BOS, PAD, letter("a")]]),
             "attention_mask": torch.tensor([[True, False, True]])}
    with pytest.raises(ValueError, match=r"rows \[0\] are not one contiguous run"):
        predictor.predict(holes, model=model)
    with pytest.raises(ValueError, match="nothing to generate"):
        UnmaskingPredictor(max_steps=2, tokenizer=tok).predict(prompt_batch([[4]]), model=model)
    with pytest.raises(KeyError, match="attention_mask"):
        predictor.predict({"input_ids": torch.tensor([[BOS]])}, model=model)
    with pytest.raises(ValueError, match="sample_index"):
        predictor.predict(prompt_batch([[4]], sample_index=torch.tensor([1, 2])), model=model)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("record", [False, True])
def test_one_host_sync_per_step_on_cuda(record, tmp_path):
    """With a history recorder too: its steps read nothing on the host (``begin`` and ``end``
    do, a number of times that does not depend on the step count)."""
    import warnings

    model = random_model().cuda()

    def syncs(n_tokens):
        predictor = UnmaskingPredictor(max_steps=n_tokens, max_new_tokens=n_tokens,
                                       tokenizer=LetterTokenizer(), confidence="entropy",
                                       temperature=0.5, top_p=0.9)
        batch = {k: v.cuda() for k, v in prompt_batch(PROMPTS).items()}
        history = HistoryTopKPlugin(k=3, output_dir=tmp_path / str(n_tokens)) if record else None
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                prediction = predictor.predict(batch, model=model, history=history)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert prediction["steps_taken"] == [n_tokens] * 3
        return sum("synchroniz" in str(w.message) for w in caught)

    assert syncs(8) - syncs(4) == 4


@pytest.mark.parametrize("side", ["left", "right"])
def test_stop_at_eos_while_infilling_never_changes_the_fixed_tokens(side):
    """An EOS written into an early mask settles the text: the masks after it become padding,
    but the prompt's own tokens between the masks stay (they used to be padded away too)."""
    tok = LetterTokenizer()
    model = PositionTableModel(torch.full((40, VOCAB), 0.0).index_fill_(1, torch.tensor([EOS]), 5.0))
    prompt = [letter("a"), MASK, letter("b"), MASK, letter("c"), MASK]
    batch = prompt_batch([prompt, [letter("d"), MASK]], side=side, infill=True)
    out = UnmaskingPredictor(max_steps=3, tokenizer=tok, confidence="top_prob",
                             stop_at_eos=True).predict(batch, model=model)
    real = batch["attention_mask"]
    assert out["ids"][0][real[0]].tolist() == [BOS, letter("a"), EOS, letter("b"), PAD, letter("c"), PAD]
    assert out["ids"][1][real[1]].tolist() == [BOS, letter("d"), EOS]
    assert out["steps_taken"] == [1, 1]
