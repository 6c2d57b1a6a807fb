"""KV-cache decoding gives, token for token, what full recomputation of every prefix gives."""

import pytest
import torch
from arlm_helpers import prompt_batch

from xdllm.predict import streams
from xdllm.predict.sampling import choose_tokens, final_distribution, never_generated_ids
from xdllm_models.arlm.predictor import ARPredictor

PROMPTS = [[4, 5, 6], [7], [8, 9, 10, 11, 12, 13], [14, 15], [16, 17, 18, 19]]
NEW_TOKENS = 7


def recompute(model, tokenizer, prompt: list[int], sample_index: int, *, temperature=0.0, top_k=None,
              top_p=None, seed=0) -> list[int]:
    """Reference decoder: one unpadded row, the whole sequence through the network at every step."""
    sequence = [tokenizer.bos_token_id, *prompt]
    draws = streams.uniforms(streams.row_keys(seed, torch.tensor([sample_index])), 0, streams.Purpose.TOKEN,
                             NEW_TOKENS)[0]
    out = []
    for step in range(NEW_TOKENS):
        with torch.no_grad():
            logits = model(torch.tensor([sequence]))[0, -1]
        probs = final_distribution(logits, temperature, top_k, top_p, banned_ids=never_generated_ids(tokenizer))
        token = int(choose_tokens(probs, draws[step] if temperature > 0 else None))
        out.append(token)
        sequence.append(token)
        if token == tokenizer.eos_token_id:
            break
    return out


def generated(prediction, row: int, pad: int) -> list[int]:
    start = int(prediction["output_start_idx"][row])
    tokens = prediction["ids"][row, start:].tolist()
    return tokens[:prediction["steps_taken"][row]]


@pytest.mark.parametrize("rows", [[1], [0, 1, 2, 3, 4], [3, 0, 2]], ids=str)
@pytest.mark.parametrize("sampling", [{}, {"temperature": 1.0}, {"temperature": 0.8, "top_k": 5},
                                      {"temperature": 1.3, "top_p": 0.7}], ids=str)
def test_cached_decoding_equals_full_recomputation(tiny_model, tokenizer, rows, sampling):
    predictor = ARPredictor(max_new_tokens=NEW_TOKENS, tokenizer=tokenizer, **sampling)
    batch = prompt_batch(tokenizer, [PROMPTS[r] for r in rows], sample_index=rows)
    prediction = predictor.predict(batch, model=tiny_model)
    for row, index in enumerate(rows):
        expected = recompute(tiny_model, tokenizer, PROMPTS[index], index, **sampling)
        assert generated(prediction, row, tokenizer.pad_token_id) == expected, (rows, index)


def test_right_padded_prompts_decode_as_left_padded_ones(tiny_model, tokenizer):
    left = prompt_batch(tokenizer, PROMPTS, sample_index=list(range(5)))
    lengths = left["attention_mask"].sum(1)
    width = left["input_ids"].shape[1]
    shift = (torch.arange(width)[None] + (width - lengths)[:, None]) % width  # roll each row left
    right = {**left, "input_ids": left["input_ids"].gather(1, shift),
             "attention_mask": left["attention_mask"].gather(1, shift)}
    assert not right["attention_mask"][:, 0].logical_not().any()  # real tokens first
    predictor = ARPredictor(max_new_tokens=NEW_TOKENS, tokenizer=tokenizer, temperature=1.0)
    a, b = predictor.predict(left, model=tiny_model), predictor.predict(right, model=tiny_model)
    assert a["text"] == b["text"] and a["steps_taken"] == b["steps_taken"]
    for row in range(5):
        assert generated(a, row, 0) == generated(b, row, 0)


def test_cached_logits_match_the_full_forward(tiny_model, tokenizer):
    """The cache path of the network itself: prefill then one token at a time, against one pass."""
    from xdllm.nn import CausalMask

    ids = torch.tensor([[2, 4, 5, 6, 7, 8, 9]])
    full = tiny_model(ids)
    cache = tiny_model.new_kv_cache(1, ids.shape[1])
    pieces = [tiny_model(ids[:, :3], positions=torch.arange(3)[None], mask_rule=CausalMask(), kv_cache=cache)]
    for column in range(3, ids.shape[1]):
        pieces.append(tiny_model(ids[:, column:column + 1], positions=torch.tensor([[column]]), kv_cache=cache))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)
