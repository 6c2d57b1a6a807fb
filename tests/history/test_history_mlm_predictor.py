"""The recorder driven by the real MLMPredictor and a tiny random RotaryTransformerMLMModel."""

from __future__ import annotations

import torch

from xdllm.data.tokenizer import builtin_tokenizer
from xdllm.history import load_history
from xdllm_models.mlm.history import HistoryTopKPlugin
from xdllm_models.mlm.model import RotaryTransformerMLMModel
from xdllm_models.mlm.predictor import MLMPredictor


def test_history_of_a_real_prediction(tmp_path):
    torch.manual_seed(0)
    tokenizer = builtin_tokenizer()
    model = RotaryTransformerMLMModel(tokenizer.vocab_size, d_model=32, n_layers=1, n_heads=2,
                                      attn_backend="sdpa").eval()
    predictor = MLMPredictor(max_steps=4, max_new_tokens=6, tokenizer=tokenizer, model=model,
                             confidence="top_prob")
    pad = tokenizer.pad_token_id
    prompts = [tokenizer.encode("1 2 3"), tokenizer.encode("4 5"), tokenizer.encode("a b c d")]
    width = max(map(len, prompts))
    batch = {
        "input_ids": torch.tensor([[pad] * (width - len(p)) + p for p in prompts]),
        "attention_mask": torch.tensor([[False] * (width - len(p)) + [True] * len(p)
                                        for p in prompts]),
        "sample_index": torch.tensor([10, 11, 12]),
    }
    recorder = HistoryTopKPlugin(k=4, output_dir=tmp_path, tokenizer=tokenizer)
    prediction = predictor.predict(batch, history=recorder)
    assert torch.equal(prediction["ids"], predictor.predict(batch)["ids"])  # recording is inert

    history = load_history(recorder.files_written[0])
    assert history.sample_ids == [10, 11, 12]
    for b in range(3):
        sample = history.sample(b)
        start = int(prediction["output_start_idx"][b])
        assert sample.output_start == start
        assert sample.num_steps == prediction["steps_taken"][b]
        assert torch.equal(sample.canvas[-1], prediction["ids"][b, start:])
        assert sample.masks_remaining[-1] == 0
        assert sample.prompt_ids.tolist() == prompts[b]
        assert sample.text == prediction["text"][b]
        # every one of the 6 new positions is committed exactly once
        assert sample.committed.sum(0).tolist() == [1] * 6
        # argmax decoding with top_prob confidence: the committed token is the top-1 entry
        # and its confidence is the top-1 probability at the commit step
        s, j = sample.committed.nonzero(as_tuple=True)
        assert torch.equal(sample.canvas[s, j], sample.topk_ids[s, j, 0])
        torch.testing.assert_close(sample.confidence_at_commit[j], sample.topk_probs[s, j, 0],
                                   atol=1e-3, rtol=1e-3)
        assert bool((sample.topk_probs[..., :-1] >= sample.topk_probs[..., 1:]).all())
