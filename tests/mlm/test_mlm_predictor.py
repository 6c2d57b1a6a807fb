"""MLMPredictor: seed-004 signature, and end to end on a random rotary transformer."""

import inspect

import pytest
import torch
from torch import nn

from xdllm.predict import UnmaskingPredictor, match_output_regions
from xdllm_models.mlm.model import RotaryTransformerMLMModel
from xdllm_models.mlm.predictor import MLMPredictor


class DigitTokenizer:
    """pad/mask/bos/eos = 0-3, then the ten digits (kept local: ``xdllm.data`` imports Lightning)."""

    pad_token_id, mask_token_id, bos_token_id, eos_token_id = 0, 1, 2, 3
    vocab_size = 14
    special_token_ids = frozenset(range(4))

    def encode(self, text):
        return [4 + int(symbol) for symbol in text.split()]

    def id_to_token(self, token_id):
        return "<pad> <mask> <bos> <eos>".split()[token_id] if token_id < 4 else str(token_id - 4)

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(self.id_to_token(int(i)) for i in ids
                        if not (skip_special_tokens and int(i) < 4))


SEED_004 = [("max_steps", inspect.Parameter.empty), ("max_new_tokens", None), ("tokenizer", None),
            ("model", None), ("noise_schedule", None), ("top_k", None), ("top_p", None),
            ("confidence", None), ("threshold", None), ("skip_special_tokens", True)]


def test_signature_starts_with_seed_004_names_and_defaults():
    params = list(inspect.signature(MLMPredictor.__init__).parameters.values())[1:]
    assert [(p.name, p.default) for p in params[:len(SEED_004)]] == SEED_004
    assert [p.name for p in params[len(SEED_004):]] == [
        "temperature", "block_size", "stop_at_eos", "remask", "prefix_cache", "prefix_cache_refresh",
        "dual_cache", "guidance", "entropy_budget", "seed"]
    predictor = MLMPredictor(max_steps=4)
    assert isinstance(predictor, nn.Module) and isinstance(predictor, UnmaskingPredictor)
    assert predictor.temperature == 0.0


def prompts_batch(tok, prompts, side, first_index=0):
    rows = [[tok.bos_token_id, *tok.encode(p)] for p in prompts]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    for i, row in enumerate(rows):
        cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        ids[i, cols], mask[i, cols] = torch.tensor(row), True
    return {"input_ids": ids, "attention_mask": mask, "sample_index": torch.arange(len(rows)) + first_index}


@pytest.mark.parametrize("confidence", ["top_prob", "prob_diff", "entropy", None])
def test_random_transformer_end_to_end(confidence):
    tok = DigitTokenizer()
    torch.manual_seed(0)
    model = RotaryTransformerMLMModel(tok.vocab_size, d_model=32, n_layers=2, n_heads=2,
                                      attn_backend="sdpa").double().eval()
    predictor = MLMPredictor(max_steps=3, max_new_tokens=5, tokenizer=tok, model=model,
                             confidence=confidence, block_size=None)
    prompts = ["1 2 3", "9", "4 5 6 7 8"]
    left = predictor.predict(prompts_batch(tok, prompts, "left"))
    right = predictor.predict(prompts_batch(tok, prompts, "right"))
    alone = [predictor.predict(prompts_batch(tok, [p], "left", i)) for i, p in enumerate(prompts)]
    assert left["text"] == right["text"] == [a["text"][0] for a in alone]
    assert left["steps_taken"] == [3, 3, 3]
    region = torch.stack([left["ids"][0, 6:11], left["ids"][1, 6:11], left["ids"][2, 6:11]])
    assert not (region == tok.mask_token_id).any()
    target = region.clone()
    match = match_output_regions(left["ids"], left["output_start_idx"], target,
                                 tok.eos_token_id, tok.pad_token_id)
    assert match.exact.all()
