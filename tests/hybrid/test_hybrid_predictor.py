"""Hybrid decoding with a KV cache gives, token for token, what full recomputation gives, and
every forward pass is a step the history recorder sees."""

import pytest
import torch
from hybrid_helpers import RecordingHistory, prompt_batch, tiny_hybrid

from xdllm.predict import streams
from xdllm.predict.confidence import token_confidence
from xdllm.predict.sampling import choose_tokens, final_distribution, never_generated_ids
from xdllm.predict.stopping import fill_after_eos
from xdllm.predict.unmask_count import scheduled_count, select_positions
from xdllm_models.arlm.predictor import ARPredictor
from xdllm_models.hybrid.predictor import HybridPredictor

PROMPTS = [[4, 5, 6], [7], [8, 9, 10, 11, 12, 13], [14, 15], [16, 17, 18, 19]]
NEW_TOKENS = 10


def recompute(model, tok, prompt: list[int], index: int, block: int, threshold=None, temperature=0.0,
              confidence="top_prob", entropy_budget=None) -> tuple[list[int], int]:
    """Reference decoder: one unpadded row, no cache. The seed from a causal pass over the whole
    sequence, each fill pass from the training forward over [x_t | x_0] of the whole sequence.
    Returns the generated tokens and the number of forward passes."""
    sequence = [tok.bos_token_id, *prompt]
    offset = (-len(sequence)) % block
    keys = streams.row_keys(0, torch.tensor([index]))
    passes = block - 1
    out: list[int] = []
    passes_run = 0

    def distribution(logits):
        return final_distribution(logits, temperature, None, None, banned_ids=never_generated_ids(tok))

    def draws(stream_step, width):
        return streams.uniforms(keys, stream_step, streams.Purpose.TOKEN, width) if temperature else None

    for b in range(-(-NEW_TOKENS // block)):
        positions = torch.arange(len(sequence) + block)[None] + offset
        with torch.no_grad():
            logits = model(torch.tensor([sequence]), positions=positions[:, :len(sequence)])[:, -1]
        passes_run += 1
        seed_draw = draws(b * (passes + 1), 1)
        blk = torch.full((1, block), tok.mask_token_id)
        blk[0, 0] = choose_tokens(distribution(logits), None if seed_draw is None else seed_draw[:, 0])
        valid = torch.ones_like(blk, dtype=torch.bool)
        blk = fill_after_eos(blk, valid, tok.eos_token_id, tok.mask_token_id, tok.pad_token_id)[0]
        for fill_pass in range(1, passes + 1):
            masked = blk == tok.mask_token_id
            if not masked.any():
                break
            ids = torch.cat([torch.tensor([sequence]), blk], dim=1)
            with torch.no_grad():
                logits = model.branches(ids, ids, torch.ones_like(ids, dtype=torch.bool), positions,
                                        block).diffusion[:, len(sequence):]
            passes_run += 1
            probs = distribution(logits)
            tokens = choose_tokens(probs, draws(b * (passes + 1) + fill_pass, block))
            scores = token_confidence(confidence, probs, tokens)
            count = scheduled_count(masked.sum(1), torch.tensor([passes - fill_pass + 1]), torch.tensor([passes]),
                                    None)
            blk = torch.where(select_positions(scores, masked, count, threshold, probs, entropy_budget),
                              tokens, blk)
            blk = fill_after_eos(blk, valid, tok.eos_token_id, tok.mask_token_id, tok.pad_token_id)[0]
        out += blk[0].tolist()
        sequence += blk[0].tolist()
        if tok.eos_token_id in out:
            break
    return out, passes_run


def region(prediction, row: int, length: int) -> list[int]:
    start = int(prediction["output_start_idx"][row])
    return prediction["ids"][row, start:start + length].tolist()


@pytest.mark.parametrize("rows", [[0, 1, 2, 3, 4], [3, 0, 2]], ids=str)
@pytest.mark.parametrize("options", [{"block_size": 4, "threshold": None}, {"block_size": 4, "threshold": 0.3},
                                     {"block_size": 3, "threshold": None, "temperature": 1.0},
                                     {"block_size": 1, "threshold": None, "temperature": 1.0},
                                     {"block_size": 4, "threshold": None, "entropy_budget": 4.0,
                                      "temperature": 1.0}], ids=str)
def test_cached_decoding_equals_full_recomputation(tiny_model, tokenizer, rows, options):
    predictor = HybridPredictor(max_new_tokens=NEW_TOKENS, tokenizer=tokenizer, **options)
    prediction = predictor.predict(prompt_batch(tokenizer, [PROMPTS[r] for r in rows], sample_index=rows),
                                   model=tiny_model)
    for row, index in enumerate(rows):
        expected, passes = recompute(tiny_model, tokenizer, PROMPTS[index], index, options["block_size"],
                                     options["threshold"], options.get("temperature", 0.0),
                                     entropy_budget=options.get("entropy_budget"))
        assert region(prediction, row, len(expected)) == expected, (rows, index)
        assert prediction["steps_taken"][row] == passes


def test_rows_stop_at_eos(tiny_model, tokenizer):
    """Some rows of the tiny network end early: the rest of their region is padding and they
    take no more passes; with threshold None a block costs its seed and one pass per token."""
    predictor = HybridPredictor(max_new_tokens=NEW_TOKENS, block_size=4, tokenizer=tokenizer, threshold=None)
    prediction = predictor.predict(prompt_batch(tokenizer, PROMPTS, sample_index=list(range(5))), model=tiny_model)
    outputs = [recompute(tiny_model, tokenizer, p, i, 4) for i, p in enumerate(PROMPTS)]
    assert any(len(o) < 12 for o, _ in outputs) and any(tokenizer.eos_token_id not in o for o, _ in outputs)
    for row, (expected, passes) in enumerate(outputs):
        assert region(prediction, row, 12) == expected + [tokenizer.pad_token_id] * (12 - len(expected))
        assert prediction["steps_taken"][row] == passes <= len(expected)
    assert prediction["steps_taken"][1] == 12  # no EOS: 3 blocks of seed + 3 fill passes


def test_block_size_one_is_the_autoregressive_predictor(tiny_model, tokenizer):
    batch = prompt_batch(tokenizer, PROMPTS, sample_index=list(range(5)))
    hybrid = HybridPredictor(max_new_tokens=NEW_TOKENS, block_size=1, tokenizer=tokenizer).predict(batch, tiny_model)
    causal = ARPredictor(max_new_tokens=NEW_TOKENS, tokenizer=tokenizer).predict(batch, tiny_model)
    assert torch.equal(hybrid["ids"], causal["ids"])
    assert hybrid["steps_taken"] == causal["steps_taken"] and hybrid["text"] == causal["text"]


def test_right_padded_prompts_decode_as_left_padded_ones(tiny_model, tokenizer):
    left = prompt_batch(tokenizer, PROMPTS, sample_index=list(range(5)))
    lengths = left["attention_mask"].sum(1)
    width = left["input_ids"].shape[1]
    shift = (torch.arange(width)[None] + (width - lengths)[:, None]) % width  # roll each row left
    right = {**left, "input_ids": left["input_ids"].gather(1, shift),
             "attention_mask": left["attention_mask"].gather(1, shift)}
    predictor = HybridPredictor(max_new_tokens=NEW_TOKENS, block_size=4, tokenizer=tokenizer, temperature=1.0)
    a, b = predictor.predict(left, model=tiny_model), predictor.predict(right, model=tiny_model)
    assert a["text"] == b["text"] and a["steps_taken"] == b["steps_taken"]
    for row in range(5):
        assert region(a, row, 12) == region(b, row, 12)


@pytest.mark.parametrize("options, passes_per_block", [
    ({"threshold": None}, 4),                           # seed + one token per fill pass
    ({"threshold": 0.0}, 2),                            # seed + everything above 0 in one pass
    ({"threshold": None, "steps_per_block": 1}, 2),     # the whole block in one pass
    ({"threshold": None, "steps_per_block": 2}, 3),
    ({"threshold": None, "entropy_budget": 0.0}, 4),    # nothing certain: the schedule's one a pass
    ({"threshold": None, "entropy_budget": 1e9}, 2)])   # every candidate fits: the block in one pass
def test_the_threshold_and_the_pass_budget_set_the_passes_per_block(tiny_model, tokenizer, options,
                                                                    passes_per_block):
    predictor = HybridPredictor(max_new_tokens=8, block_size=4, tokenizer=tokenizer, stop_at_eos=False, **options)
    prediction = predictor.predict(prompt_batch(tokenizer, PROMPTS), model=tiny_model)
    assert prediction["steps_taken"] == [2 * passes_per_block] * 5
    assert not (prediction["ids"] == tokenizer.mask_token_id).any()


def test_the_history_recorder_sees_every_pass(tokenizer):
    model = tiny_hybrid(tokenizer.vocab_size)
    with torch.no_grad():
        model.lm_head.weight[tokenizer.eos_token_id] *= 3.0  # some rows stop early
    history = RecordingHistory(k=3)
    predictor = HybridPredictor(max_new_tokens=NEW_TOKENS, block_size=4, tokenizer=tokenizer, threshold=0.5)
    prediction = predictor.predict(prompt_batch(tokenizer, PROMPTS), model=model, history=history)
    assert history.ended is prediction and [s.step for s in history.steps] == list(range(len(history.steps)))
    for row in range(len(PROMPTS)):
        active = [s for s in history.steps if bool(s.active[row])]
        assert len(active) == prediction["steps_taken"][row]
        commits = torch.stack([s.committed[row] for s in active])
        assert commits.sum(0).max() == 1  # every offset committed once at most
        decoded = commits.any(0).nonzero().flatten().tolist()
        assert decoded == list(range(len(decoded))) and len(decoded) % 4 == 0  # whole blocks, in order
        for state in active:
            offsets = state.committed[row].nonzero().flatten()
            assert len(offsets) >= 1 and len(set((offsets // 4).tolist())) == 1  # one block per step
            assert (state.topk_probs[row, offsets, 0] >= state.topk_probs[row, offsets, 1]).all()
        end = int(prediction["output_start_idx"][row]) + len(decoded)  # later blocks were never decoded
        assert torch.equal(active[-1].canvas[row, :end], prediction["ids"][row, :end])
    assert not any(bool(s.committed[~s.active].any()) for s in history.steps)


def test_positions_beyond_the_model_are_refused(tokenizer):
    model = tiny_hybrid(tokenizer.vocab_size, max_positions=11)
    predictor = HybridPredictor(max_new_tokens=8, block_size=4, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="reaches position 11, beyond the model.s max_positions=11"):
        predictor.predict(prompt_batch(tokenizer, [[4, 5]]), model=model)


@pytest.mark.parametrize("options, message", [
    ({"block_size": 0}, "block_size must be >= 1"),
    ({"block_size": 4, "steps_per_block": 0}, "steps_per_block must be >= 1"),
    ({"block_size": 4, "confidence": None, "threshold": 0.5}, "threshold needs a confidence mode"),
    ({"block_size": 4, "top_p": 2.0}, "top_p must be in"),
    ({"block_size": 4, "entropy_budget": -0.5}, "entropy_budget must be >= 0"),
])
def test_bad_options_are_named(tokenizer, options, message):
    with pytest.raises(ValueError, match=message):
        HybridPredictor(max_new_tokens=8, tokenizer=tokenizer, **options)


def test_remasking_takes_fill_tokens_back_keeps_the_schedule_and_never_the_seed(tiny_model, tokenizer):
    batch = prompt_batch(tokenizer, PROMPTS, sample_index=list(range(5)))
    options = dict(max_new_tokens=12, block_size=6, steps_per_block=4, threshold=None, tokenizer=tokenizer,
                   stop_at_eos=False)
    plain, remasking = RecordingHistory(k=1), RecordingHistory(k=1)
    HybridPredictor(**options).predict(batch, model=tiny_model, history=plain)
    prediction = HybridPredictor(remask=True, **options).predict(batch, model=tiny_model, history=remasking)
    mask = tokenizer.mask_token_id
    assert [int((s.canvas == mask).sum()) for s in plain.steps] == [int((s.canvas == mask).sum())
                                                                     for s in remasking.steps]
    before = torch.stack([s.canvas for s in remasking.steps[:-1]])
    after = torch.stack([s.canvas for s in remasking.steps[1:]])
    steps, rows, columns = ((before != mask) & (after == mask)).nonzero(as_tuple=True)
    assert steps.numel() > 0
    offsets = columns - prediction["output_start_idx"][rows]
    assert (offsets % 6 != 0).all()  # a block's seed, from the causal branch, is never taken back
    assert not (prediction["ids"] == mask).any()
    width = batch["input_ids"].shape[1]
    roll = (torch.arange(width)[None] + (width - batch["attention_mask"].sum(1))[:, None]) % width
    right = {**batch, "input_ids": batch["input_ids"].gather(1, roll),
             "attention_mask": batch["attention_mask"].gather(1, roll)}
    assert HybridPredictor(remask=True, **options).predict(right, model=tiny_model)["text"] == prediction["text"]
