"""ARPredictor: options checked up front, stop at EOS, history at every step, batch invariance."""

import pytest
import torch
from arlm_helpers import prompt_batch

from xdllm.interfaces import DenoisingStep
from xdllm_models.arlm.model import CausalRotaryTransformer
from xdllm_models.arlm.predictor import ARPredictor

PROMPTS = [[4, 5, 6], [7], [8, 9, 10, 11]]


@pytest.mark.parametrize("options, message", [
    ({"temperature": -0.5}, "temperature must be >= 0"),
    ({"top_k": 0}, "top_k must be >= 1 or None"),
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
    ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
    ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
    ({"seed": -1}, "seed must be >= 0"),
])
def test_bad_options_are_refused_by_name(tokenizer, options, message):
    with pytest.raises(ValueError, match=f"ARPredictor: {message}"):
        ARPredictor(**{"max_new_tokens": 4, "tokenizer": tokenizer, **options})


def test_a_row_without_any_real_token_is_refused(tiny_model, tokenizer):
    batch = prompt_batch(tokenizer, [[4]])
    batch["attention_mask"][:] = False
    with pytest.raises(ValueError, match="at least one real token"):
        ARPredictor(max_new_tokens=3, tokenizer=tokenizer).predict(batch, model=tiny_model)


class EOSAtPosition(CausalRotaryTransformer):
    """The tiny network, but EOS wins at RoPE position ``eos_position`` and later, and never before."""

    eos_position = 6

    def forward(self, input_ids, attention_mask=None, positions=None, segment_ids=None, block_mask=None, **kw):
        logits = super().forward(input_ids, attention_mask, positions, segment_ids, block_mask, **kw)
        if positions is None:
            positions = torch.arange(input_ids.shape[1])[None]
        eos_bias = torch.where(positions >= self.eos_position, 100.0, -100.0)
        return logits + eos_bias[..., None] * torch.nn.functional.one_hot(torch.tensor(3), logits.shape[-1])


@pytest.fixture
def eos_model(tiny_model):
    model = EOSAtPosition(tiny_model.config).eval()
    model.load_state_dict(tiny_model.state_dict())
    return model


def test_rows_stop_at_their_first_eos_and_the_rest_is_padding(eos_model, tokenizer):
    # prompts of 4, 2 and 5 tokens with bos: the logit at position 6 (the 7th token) predicts the 8th
    predictor = ARPredictor(max_new_tokens=8, tokenizer=tokenizer)
    out = predictor.predict(prompt_batch(tokenizer, PROMPTS), model=eos_model)
    assert out["steps_taken"] == [4, 6, 3]  # tokens until EOS, EOS included: one forward pass each
    for row, steps in enumerate(out["steps_taken"]):
        region = out["ids"][row, int(out["output_start_idx"][row]):].tolist()
        assert region[steps - 1] == tokenizer.eos_token_id
        assert region[steps:] == [tokenizer.pad_token_id] * (8 - steps)
        assert tokenizer.mask_token_id not in region
    unstopped = ARPredictor(max_new_tokens=8, tokenizer=tokenizer, stop_at_eos=False)
    full = unstopped.predict(prompt_batch(tokenizer, PROMPTS), model=eos_model)
    assert full["steps_taken"] == [8, 8, 8] and full["text"] == out["text"]


class StepLog:
    k = 3

    def __init__(self):
        self.steps: list[DenoisingStep] = []
        self.began = self.ended = 0

    def begin(self, batch, canvas, output_start):
        self.began += 1

    def on_step(self, state):
        self.steps.append(state)

    def end(self, prediction):
        self.ended += 1


def test_the_history_sees_every_step_with_its_top_k(eos_model, tokenizer):
    log = StepLog()
    out = ARPredictor(max_new_tokens=8, tokenizer=tokenizer).predict(prompt_batch(tokenizer, PROMPTS),
                                                                     model=eos_model, history=log)
    assert log.began == log.ended == 1 and len(log.steps) == max(out["steps_taken"]) == 6
    steps_seen = torch.zeros(3, dtype=torch.long)
    for step, state in enumerate(log.steps):
        assert state.step == step and state.topk_ids.shape == (3, 8, 3)
        steps_seen += state.active.long()
        for row in range(3):
            committed = state.committed[row].nonzero().flatten().tolist()
            if not state.active[row]:
                assert committed == [] and not state.topk_probs[row].any()
                continue
            assert committed == [step]  # one token per step, left to right
            token = int(state.canvas[row, int(state.output_start[row]) + step])
            assert int(state.topk_ids[row, step, 0]) == token  # greedy: the best of the top-k
            assert state.topk_probs[row, step].diff().le(0).all()
            assert float(state.confidence[row, step]) == pytest.approx(float(state.topk_probs[row, step, 0]))
            assert not state.topk_probs[row, :step].any() and not state.topk_probs[row, step + 1:].any()
    assert steps_seen.tolist() == out["steps_taken"]


def test_top_k_of_one_and_a_tiny_nucleus_are_greedy(tiny_model, tokenizer):
    batch = prompt_batch(tokenizer, PROMPTS)
    greedy = ARPredictor(max_new_tokens=6, tokenizer=tokenizer).predict(batch, model=tiny_model)
    for options in ({"top_k": 1}, {"top_p": 1e-6}):
        sampled = ARPredictor(max_new_tokens=6, tokenizer=tokenizer, temperature=1.5, **options)
        assert torch.equal(sampled.predict(batch, model=tiny_model)["ids"], greedy["ids"])


def test_sampling_depends_on_the_seed_and_sample_not_on_the_batch(tiny_model, tokenizer):
    def run(prompts, index, seed=0):
        predictor = ARPredictor(max_new_tokens=6, tokenizer=tokenizer, temperature=2.0, stop_at_eos=False, seed=seed)
        return predictor.predict(prompt_batch(tokenizer, prompts, sample_index=index), model=tiny_model)["text"]

    together = run(PROMPTS, [10, 11, 12])
    assert [run([p], [i])[0] for p, i in zip(PROMPTS, [10, 11, 12])] == together
    assert run(PROMPTS, [10, 11, 12], seed=1) != together
