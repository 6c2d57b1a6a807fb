"""UDLM decoding: blocks start as uniform random tokens, every step re-predicts every position (a
token can change after it was written), a block stops when nothing changes or it is confident,
and the cached decoding equals recomputation through the training forward."""

import pytest
import torch
from torch import nn
from udlm_helpers import RecordingHistory, prompt_batch

from xdllm.predict import streams
from xdllm.predict.sampling import never_generated_ids
from xdllm_models.udlm.predictor import UDLMPredictor

PROMPTS = [[4, 5, 6], [7], [8, 9, 10, 11, 12, 13], [14, 15]]


class PositionOnlyModel(nn.Module):
    """Logits that ignore the tokens: position p predicts letter ``4 + p % 8`` with probability
    ``peak`` (the rest spread evenly); EOS from position ``eos_from`` on. A denoiser whose first
    step is already a fixed point."""

    def __init__(self, vocab: int, peak: float = 0.9, eos_from: int = 10_000) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.vocab, self.peak, self.eos_from = vocab, peak, eos_from

    def new_kv_cache(self, batch_size: int, max_len: int):
        return None

    def forward(self, ids, attention_mask=None, positions=None, mask_rule=None, kv_cache=None, write_cache=True):
        token = torch.where(positions >= self.eos_from, 3, 4 + positions % 8)
        probs = torch.full((*ids.shape, self.vocab), (1 - self.peak) / (self.vocab - 1))
        probs.scatter_(-1, token[..., None], self.peak)
        return probs.log()


def reference(model, tok, prompt: list[int], index: int, size: int, new_tokens: int, steps: int,
              stop_when_unchanged: bool = True) -> tuple[list[int], int]:
    """One unpadded row, no cache: every step runs the training forward over [canvas | sequence so far];
    an EOS does not stop the row (``stop_at_eos=False``). Returns the generated tokens and the denoising steps."""
    predictor = UDLMPredictor(new_tokens, size, tokenizer=tok, steps_per_block=steps)
    sequence = [tok.bos_token_id, *prompt]
    offset = (-len(sequence)) % size
    keys = streams.row_keys(0, torch.tensor([index]))
    out, taken = [], 0
    for b in range(-(-new_tokens // size)):
        block = predictor.initial_block(keys, b, tok.vocab_size)
        ids = torch.tensor([sequence])
        positions = torch.arange(len(sequence))[None] + offset
        block_positions = len(sequence) + offset + torch.arange(size)[None]
        for _ in range(steps):
            with torch.no_grad():
                logits = model.canvas_and_encoder(block, block_positions, ids, torch.ones_like(ids, dtype=torch.bool),
                                                  positions, size).canvas
            logits[..., list(never_generated_ids(tok))] = float("-inf")
            new = logits.argmax(-1)
            taken += 1
            unchanged = torch.equal(new, block)
            block = new
            if stop_when_unchanged and unchanged:
                break
        out += block[0].tolist()
        sequence += block[0].tolist()
    return out, taken


@pytest.mark.parametrize("stop_when_unchanged", [True, False])
def test_cached_decoding_equals_recomputation(tokenizer, tiny_model, stop_when_unchanged):
    predictor = UDLMPredictor(10, 4, tokenizer=tokenizer, model=tiny_model, steps_per_block=5,
                              stop_when_unchanged=stop_when_unchanged, stop_at_eos=False)
    prediction = predictor.predict(prompt_batch(tokenizer, PROMPTS, sample_index=[3, 1, 4, 1]))
    for row, (prompt, index) in enumerate(zip(PROMPTS, [3, 1, 4, 1])):
        tokens, steps = reference(tiny_model, tokenizer, prompt, index, 4, 10, 5, stop_when_unchanged)
        start = int(prediction["output_start_idx"][row])
        assert prediction["ids"][row, start:start + 12].tolist() == tokens
        blocks = 3
        assert prediction["steps_taken"][row] == 1 + steps + (blocks - 1)  # prompt, steps, appends


def test_a_position_changes_value_across_steps(tokenizer, tiny_model):
    history = RecordingHistory(k=2)
    predictor = UDLMPredictor(8, 4, tokenizer=tokenizer, model=tiny_model, steps_per_block=6,
                              stop_when_unchanged=False, stop_at_eos=False)
    prediction = predictor.predict(prompt_batch(tokenizer, PROMPTS), history=history)
    canvases = torch.stack([state.canvas for state in history.steps])  # [steps, batch, seq]
    first_block = prediction["output_start_idx"][:, None] + torch.arange(4)
    block_steps = canvases[:6].gather(2, first_block[None].expand(6, -1, -1))  # the first block's 6 steps
    revised = block_steps[2:] != block_steps[1:-1]  # changes after the block's first prediction
    assert bool(revised.any())
    assert torch.equal(block_steps[-1], prediction["ids"].gather(1, first_block))
    # the block is committed at its last step only
    committed = torch.stack([state.committed[:, :4] for state in history.steps[:6]])
    assert not bool(committed[:5].any()) and bool(committed[5].all())


def test_block_stops_when_a_step_changes_nothing(tokenizer):
    model = PositionOnlyModel(tokenizer.vocab_size)
    history = RecordingHistory(k=1)
    predictor = UDLMPredictor(8, 4, tokenizer=tokenizer, model=model, steps_per_block=4, stop_at_eos=False)
    batch = prompt_batch(tokenizer, PROMPTS)
    first_noise = predictor.initial_block(streams.row_keys(0, batch["sample_index"]), 0, tokenizer.vocab_size)
    prediction = predictor.predict(batch, history=history)
    # step 1 replaces the noise, step 2 changes nothing: the block stops there, in both blocks
    assert len(history.steps) == 4
    assert not torch.equal(first_noise, history.steps[0].canvas.gather(1, prediction["output_start_idx"][:, None]
                                                                       + torch.arange(4)))
    assert all(bool(state.committed.any(1).all()) == (i % 2 == 1) for i, state in enumerate(history.steps))
    assert prediction["steps_taken"] == [1 + 4 + 1] * 4
    without_stop = UDLMPredictor(8, 4, tokenizer=tokenizer, model=model, steps_per_block=4,
                                 stop_when_unchanged=False, stop_at_eos=False).predict(batch)
    assert without_stop["steps_taken"] == [1 + 8 + 1] * 4
    assert torch.equal(without_stop["ids"], prediction["ids"])


def test_entropy_bound_stops_a_confident_block_after_one_step(tokenizer):
    batch = prompt_batch(tokenizer, PROMPTS)
    confident = UDLMPredictor(8, 4, tokenizer=tokenizer, model=PositionOnlyModel(tokenizer.vocab_size, peak=0.999),
                              steps_per_block=4, entropy_bound=0.05, stop_at_eos=False).predict(batch)
    assert confident["steps_taken"] == [1 + 2 + 1] * 4
    unsure = UDLMPredictor(8, 4, tokenizer=tokenizer, model=PositionOnlyModel(tokenizer.vocab_size, peak=0.5),
                           steps_per_block=4, entropy_bound=0.05, stop_when_unchanged=False,
                           stop_at_eos=False).predict(batch)
    assert unsure["steps_taken"] == [1 + 8 + 1] * 4


def test_stop_at_eos_ends_the_row_and_pads_after_its_first_eos(tokenizer):
    model = PositionOnlyModel(tokenizer.vocab_size, eos_from=6)  # EOS from position 6 (aligned positions)
    prediction = UDLMPredictor(12, 4, tokenizer=tokenizer, model=model, steps_per_block=3).predict(
        prompt_batch(tokenizer, [[4, 5, 6]]))  # [bos] + 3 tokens: the response starts at position 4
    start = int(prediction["output_start_idx"][0])
    region = prediction["ids"][0, start:].tolist()
    assert region == [4 + 4, 4 + 5, tokenizer.eos_token_id] + [tokenizer.pad_token_id] * 9
    assert prediction["steps_taken"] == [1 + 2]  # one block: the EOS is in it


def test_bad_options_are_refused(tokenizer):
    with pytest.raises(ValueError, match="steps_per_block"):
        UDLMPredictor(8, 4, tokenizer=tokenizer, steps_per_block=0)
    with pytest.raises(ValueError, match="entropy_bound"):
        UDLMPredictor(8, 4, tokenizer=tokenizer, entropy_bound=-1.0)
