"""Classifier-free guidance (``guidance=w``): one batch of conditional and null-prompt canvases,
mixed as ``uncond + (1 + w)(cond - uncond)``."""

import pytest
import torch
from predict_fakes import (
    BOS,
    MASK,
    PAD,
    VOCAB,
    BagOfTokensModel,
    LetterTokenizer,
    RecordingHistory,
    letter,
    prompt_batch,
)
from torch import nn

from xdllm.predict import UnmaskingPredictor
from xdllm.predict.sampling import never_generated_ids
from xdllm_models.mdlm.predictor import MDLMPredictor

CONDITIONAL = torch.tensor([0.0, 0.0, 0.0, 0.0] + [2.0, 1.0, 0.5] + [0.0] * (VOCAB - 7))
UNCONDITIONAL = torch.tensor([0.0, 0.0, 0.0, 0.0] + [0.0, 1.5, 0.5] + [0.0] * (VOCAB - 7))


class PromptSensitiveModel(nn.Module):
    """Logits ``CONDITIONAL`` at every position of a row that shows the letter 'a' (its prompt),
    ``UNCONDITIONAL`` otherwise; keeps every input it is given."""

    def __init__(self):
        super().__init__()
        self.inputs = []

    def forward(self, x_t, attention_mask=None, positions=None):
        self.inputs.append((x_t.clone(), attention_mask.clone(), positions.clone()))
        shows_prompt = ((x_t == letter("a")) & attention_mask).any(1)
        rows = torch.where(shows_prompt[:, None], CONDITIONAL, UNCONDITIONAL)
        return rows[:, None, :].expand(-1, x_t.shape[1], -1)


def decode(model, history=None, predictor=UnmaskingPredictor, prompts=([letter("a")], [letter("b"), letter("a")]),
           **options):
    options = {"max_steps": 3, "max_new_tokens": 3, "tokenizer": LetterTokenizer(), "confidence": "top_prob",
               **options}
    return predictor(**options).predict(prompt_batch(list(prompts)), model=model, history=history)


@pytest.mark.parametrize("guidance", [0.5, 2.0])
def test_a_step_samples_from_the_guided_mix_of_the_two_passes(guidance):
    history = RecordingHistory(k=3)
    decode(PromptSensitiveModel(), history=history, guidance=guidance)
    guided = UNCONDITIONAL + (1 + guidance) * (CONDITIONAL - UNCONDITIONAL)
    guided[list(never_generated_ids(LetterTokenizer()))] = float("-inf")  # pad, mask, bos are never chosen
    expected = torch.softmax(guided, -1).topk(3)
    step = history.steps[0]
    assert step.topk_ids[0, 0].tolist() == expected.indices.tolist()
    torch.testing.assert_close(step.topk_probs[0, 0], expected.values)
    # without guidance the conditional distribution alone ('a' 2.0 against 'b' 1.0: less sure)
    plain = RecordingHistory(k=3)
    decode(PromptSensitiveModel(), history=plain)
    assert float(plain.steps[0].topk_probs[0, 0, 0]) < float(step.topk_probs[0, 0, 0])


def test_the_unconditional_pass_sees_a_null_prompt_and_what_was_written():
    model = PromptSensitiveModel()
    decode(model, guidance=1.0)
    ids, attention, positions = model.inputs[0]
    conditional, unconditional = ids.chunk(2)
    assert conditional[1].tolist() == [BOS, letter("b"), letter("a"), MASK, MASK, MASK]
    assert unconditional[1].tolist() == [BOS, PAD, PAD, MASK, MASK, MASK]  # still attended, same positions
    assert unconditional[0].tolist() == [PAD, BOS, PAD, MASK, MASK, MASK]  # left padding stays padding
    assert torch.equal(attention[:2], attention[2:]) and torch.equal(positions[:2], positions[2:])
    later, _, _ = model.inputs[1]
    written = later[:2, 3:] != MASK
    assert written.any() and torch.equal(later[2:, 3:][written], later[:2, 3:][written])


def test_without_guidance_the_model_runs_once_on_the_batch():
    model = PromptSensitiveModel()
    plain = decode(model)
    assert [inputs[0].shape[0] for inputs in model.inputs] == [2, 2, 2]
    assert torch.equal(decode(PromptSensitiveModel(), guidance=0.0)["ids"], plain["ids"])


@pytest.mark.parametrize("predictor", [UnmaskingPredictor, MDLMPredictor])
def test_a_guided_sample_does_not_depend_on_its_batch_row_or_padding(predictor):
    prompts = [[letter("a")], [letter("b"), letter("c"), letter("d")], []]
    options = dict(max_steps=4, max_new_tokens=6, tokenizer=LetterTokenizer(), confidence="top_prob",
                   guidance=1.5, block_size=3)
    model = BagOfTokensModel(seed=3)
    indices = torch.tensor([10, 11, 12])
    together = predictor(**options).predict(prompt_batch(prompts, "left", sample_index=indices), model=model)
    right = predictor(**options).predict(prompt_batch(prompts, "right", sample_index=indices), model=model)
    alone = [predictor(**options).predict(prompt_batch([p], sample_index=indices[i:i + 1]), model=model)
             for i, p in enumerate(prompts)]
    assert together["text"] == right["text"] == [a["text"][0] for a in alone]
    plain = predictor(**{**options, "guidance": 0.0}).predict(prompt_batch(prompts, sample_index=indices), model=model)
    assert plain["text"] != together["text"]  # guidance changed something here


def test_what_guidance_cannot_do_is_refused_by_name():
    with pytest.raises(ValueError, match="guidance must be >= 0"):
        UnmaskingPredictor(max_steps=2, tokenizer=LetterTokenizer(), guidance=-1.0)
    with pytest.raises(ValueError, match="cannot share the conditional one's prefix_cache"):
        UnmaskingPredictor(max_steps=2, tokenizer=LetterTokenizer(), guidance=1.0, prefix_cache=True)
