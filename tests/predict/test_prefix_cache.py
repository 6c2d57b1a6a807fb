"""The approximate prefix cache (``prefix_cache=true``): kept keys of the prompt and the finished
blocks, refreshed when the earliest block moves or rows finish, one host sync per step.

A one-layer network is the exact case: a prefix token's keys and values there depend on that
token alone, so keys kept from an earlier step are the keys a full forward would compute, and
decoding with the cache must give the same tokens. With two layers they are stale."""

import pytest
import torch
from host_sync_counter import count_host_syncs
from predict_fakes import MASK, VOCAB, LetterTokenizer, PositionTableModel, RecordingHistory, letter, prompt_batch
from random_weights import sharpened
from torch import nn

from xdllm.nn.factory import denoiser_transformer
from xdllm.predict import UnmaskingPredictor
from xdllm_models.mdlm.predictor import MDLMPredictor

PROMPTS = [[letter("a")], [letter("b"), letter("c"), letter("d")], []]  # left-padded to 4 with bos


def network(n_layers, seed=0, shift_outputs=False):
    torch.manual_seed(seed)
    return sharpened(denoiser_transformer(vocab_size=VOCAB, d_model=32, n_layers=n_layers, n_heads=2,
                                          max_positions=64, shift_outputs=shift_outputs).eval())


def decode(model, history=None, predictor=UnmaskingPredictor, **options):
    options = {"max_new_tokens": 6, "tokenizer": LetterTokenizer(), **options}
    return predictor(**options).predict(prompt_batch(PROMPTS), model=model, history=history)


SETTINGS = [
    dict(max_steps=3, confidence="top_prob"),
    dict(max_steps=6, confidence="prob_diff", block_size=2),
    dict(max_steps=4, confidence="entropy", threshold=-0.5, block_size=3),
    dict(max_steps=6, temperature=1.0, top_p=0.9, confidence=None, block_size=3, stop_at_eos=True),
    dict(max_steps=6, confidence="top_prob", block_size=3, remask=True),
    dict(max_steps=5, confidence="top_prob", prefix_cache_refresh=2),
    # the dual cache keeps the masked columns after the current block too
    dict(max_steps=6, confidence="prob_diff", block_size=2, dual_cache=True),
    dict(max_steps=4, confidence="entropy", threshold=-0.5, block_size=3, dual_cache=True),
    dict(max_steps=6, temperature=1.0, top_p=0.9, confidence=None, block_size=3, dual_cache=True),
    dict(max_steps=6, confidence="top_prob", block_size=3, remask=True, dual_cache=True, prefix_cache_refresh=2),
]
CACHE_OPTIONS = ("prefix_cache_refresh", "dual_cache")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("options", SETTINGS)
@pytest.mark.parametrize("shift_outputs", [False, True])
def test_where_kept_keys_cannot_be_stale_the_cache_decodes_the_same_tokens(options, seed, shift_outputs):
    """With shifted outputs (logits at a column from the state before it) the cache runs the
    column before the ones a step writes, so the first of them reads a fresh state too."""
    model = network(n_layers=1, seed=seed, shift_outputs=shift_outputs)
    plain = decode(model, **{k: v for k, v in options.items() if k not in CACHE_OPTIONS}, seed=seed)
    cached = decode(model, **options, seed=seed, prefix_cache=True)
    assert torch.equal(cached["ids"], plain["ids"])
    assert cached["steps_taken"] == plain["steps_taken"]


def test_rows_that_finish_early_leave_the_cache_exact():
    """A threshold lets rows finish at different steps: the cache then holds the rows that run."""
    model = network(n_layers=1, seed=3)
    options = dict(max_steps=6, confidence="top_prob", threshold=0.3)
    plain = decode(model, **options)
    assert len(set(plain["steps_taken"])) > 1  # the case this test is about
    assert torch.equal(decode(model, **options, prefix_cache=True)["ids"], plain["ids"])


def test_with_two_layers_the_kept_keys_are_stale():
    """What the cache gives up: after the first step, a deeper network's prefix keys would have
    seen the tokens written since; the distributions differ (the outputs may too)."""
    options = dict(max_steps=6, confidence="top_prob", block_size=3)
    differences = {}
    for layers in (1, 2):
        plain, cached = RecordingHistory(), RecordingHistory()
        decode(network(layers), history=plain, **options)
        decode(network(layers), history=cached, **options, prefix_cache=True)
        assert torch.allclose(plain.steps[0].topk_probs, cached.steps[0].topk_probs, atol=1e-5)  # a refresh
        current = cached.steps[1].canvas[:, 4:7] == MASK  # the first block's masks after step 0
        change = (plain.steps[1].topk_probs - cached.steps[1].topk_probs)[:, :3]
        differences[layers] = float(change[current].abs().max())
    assert differences[1] < 1e-5 < 1e-3 < differences[2]
    # a finished block's columns keep what the last refresh (step 3, the second block's first) saw
    assert torch.equal(cached.steps[4].topk_probs[:, :3], cached.steps[3].topk_probs[:, :3])


def test_with_the_dual_cache_the_later_blocks_keep_what_the_refresh_saw():
    history = RecordingHistory()
    decode(network(2), history=history, max_steps=6, block_size=2, confidence="top_prob", prefix_cache=True,
           dual_cache=True)
    refresh, between = history.steps[2], history.steps[3]  # the second block's two steps
    assert torch.equal(between.topk_probs[:, 4:], refresh.topk_probs[:, 4:])  # the third block: kept
    assert not torch.equal(between.topk_probs[:, 2:4], refresh.topk_probs[:, 2:4])  # the current one: run


class WidthRecorder(nn.Module):
    """A network whose forward widths are recorded."""

    def __init__(self, network):
        super().__init__()
        self.network = network
        self.widths = []

    def final_hidden(self, ids, **inputs):
        self.widths.append(ids.shape[1])
        return self.network.final_hidden(ids, **inputs)

    @property
    def lm_head_weight(self):
        return self.network.lm_head_weight

    def new_kv_cache(self, batch_size, max_len):
        return self.network.new_kv_cache(batch_size, max_len)


@pytest.mark.parametrize(("options", "widths"), [
    # the prompt is columns 0..3 of a 10-column canvas: a refresh runs all 10, the rest 6
    (dict(max_steps=3), [10, 6, 6]),
    # blocks of 2: a refresh when the block moves on, keeping the prompt and the finished blocks
    (dict(max_steps=6, block_size=2), [10, 6, 10, 4, 10, 2]),
    # and at the latest every prefix_cache_refresh steps
    (dict(max_steps=5, prefix_cache_refresh=2), [10, 6, 10, 6, 10]),
    (dict(max_steps=6, block_size=3, prefix_cache_refresh=2), [10, 6, 10, 10, 3, 10]),
    # the dual cache: between refreshes, the current block only
    (dict(max_steps=6, block_size=2, dual_cache=True), [10, 2, 10, 2, 10, 2]),
    # 4 steps for 3 blocks: the first block has two, so one step between refreshes; the others one
    (dict(max_steps=4, block_size=2, dual_cache=True), [10, 2, 10, 10]),
])
def test_a_step_runs_only_the_columns_after_the_prefix(options, widths):
    model = WidthRecorder(network(n_layers=2))
    decode(model, confidence="top_prob", prefix_cache=True, **options)
    assert model.widths == widths


def test_rows_that_finish_leave_the_cache_without_a_refresh():
    """With a threshold rows finish at different steps; the others keep their kept keys (as
    alone, where no other row finishes): one full forward, the first, whatever rows finish."""
    model = WidthRecorder(network(n_layers=2, seed=3))
    out = decode(model, max_steps=6, confidence="top_prob", threshold=0.3, prefix_cache=True)
    assert len(set(out["steps_taken"])) > 1  # rows finished at different steps
    assert model.widths == [10] + [6] * (max(out["steps_taken"]) - 1)


def test_mdlm_takes_the_option_and_one_host_sync_per_step_holds():
    model = network(n_layers=2)

    def syncs(new_tokens):
        with count_host_syncs() as counts:
            out = decode(model, predictor=MDLMPredictor, max_steps=new_tokens, max_new_tokens=new_tokens,
                         block_size=2, prefix_cache=True)
        assert out["steps_taken"] == [new_tokens] * 3
        return sum(counts.values())

    assert syncs(8) - syncs(4) == 4


@pytest.mark.parametrize("shift_outputs", [False, True])
def test_remdm_runs_another_set_of_rows_each_step_and_the_cache_follows_them(shift_outputs):
    """ReMDM runs the model only for the rows that reveal at a step, so the running rows change
    without their number changing: the cache refreshes on the set (it did on the number) and
    stays exact on one layer; still one host sync per step."""
    model = network(n_layers=1, seed=3, shift_outputs=shift_outputs)
    batch = prompt_batch(PROMPTS * 4, sample_index=torch.arange(12))

    def run(steps, **options):
        predictor = MDLMPredictor(max_steps=steps, max_new_tokens=6, tokenizer=LetterTokenizer(), sampler="remdm",
                                  confidence=None, remdm_eta=0.2, **options)
        with count_host_syncs() as counts:
            out = predictor.predict(batch, model=model)
        return out, sum(counts.values())

    plain, _ = run(16)
    cached, syncs16 = run(16, prefix_cache=True)
    assert torch.equal(cached["ids"], plain["ids"]) and cached["steps_taken"] == plain["steps_taken"]
    assert max(plain["steps_taken"]) < 16  # rows skipped steps
    assert syncs16 - run(8, prefix_cache=True)[1] == 8


def test_what_the_cache_cannot_serve_is_refused_by_name():
    tokenizer = LetterTokenizer()
    with pytest.raises(ValueError, match="dual_cache keeps the columns after the current block: it needs "
                                         "prefix_cache=true and a block_size, got prefix_cache=True, block_size=None"):
        UnmaskingPredictor(max_steps=2, tokenizer=tokenizer, prefix_cache=True, dual_cache=True)
    for refresh, cache in ((2, False), (0, True)):
        with pytest.raises(ValueError, match="prefix_cache_refresh must be >= 1 and needs prefix_cache=true"):
            UnmaskingPredictor(max_steps=2, tokenizer=tokenizer, prefix_cache=cache, prefix_cache_refresh=refresh)
    cached = UnmaskingPredictor(max_steps=2, max_new_tokens=2, tokenizer=tokenizer, prefix_cache=True)
    table = PositionTableModel(torch.zeros(40, VOCAB))
    history = RecordingHistory()
    with pytest.raises(ValueError, match="needs a model with .*PositionTableModel has no final_hidden"):
        cached.predict(prompt_batch(PROMPTS), model=table, history=history)
    assert history.begun is None  # refused before the recorder began a batch it would never end

    class ShiftedWithoutUnshifted(nn.Module):
        shifts_outputs, lm_head_weight = True, torch.zeros(VOCAB, 4)

        def final_hidden(self, ids, attention_mask=None, positions=None, *, mask_rule=None, kv_cache=None,
                         write_cache=True):
            return torch.zeros(*ids.shape, 4)

        def new_kv_cache(self, batch_size, max_len):
            raise AssertionError("refused before any forward")

    with pytest.raises(ValueError, match="shifts its outputs needs its final_hidden to take unshifted=True "
                                         ".*; ShiftedWithoutUnshifted.final_hidden does not"):
        cached.predict(prompt_batch(PROMPTS), model=ShiftedWithoutUnshifted())
    infill = UnmaskingPredictor(max_steps=2, tokenizer=tokenizer, prefix_cache=True)
    holes = prompt_batch([[letter("a"), MASK], [MASK, letter("b"), letter("c"), MASK]], infill=True)
    with pytest.raises(ValueError, match="same canvas column"):
        infill.predict(holes, model=network(n_layers=1))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dual", [False, True])
def test_on_cuda_the_cache_is_exact_where_it_can_be_and_syncs_once_per_step(dual):
    import warnings

    model = network(n_layers=1).cuda()
    batch = {k: v.cuda() for k, v in prompt_batch(PROMPTS).items()}

    def run(new_tokens, **options):
        predictor = UnmaskingPredictor(max_steps=new_tokens, max_new_tokens=new_tokens, tokenizer=LetterTokenizer(),
                                       confidence="top_prob", block_size=2, **options)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                prediction = predictor.predict(batch, model=model)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return prediction, sum("synchroniz" in str(w.message) for w in caught)

    plain, _ = run(8)
    cached, syncs_8 = run(8, prefix_cache=True, dual_cache=dual)
    assert torch.equal(cached["ids"], plain["ids"])
    assert syncs_8 - run(4, prefix_cache=True, dual_cache=dual)[1] == 4
