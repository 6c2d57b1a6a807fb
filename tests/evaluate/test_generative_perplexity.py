"""The judge scores each output given its prompt, through its first EOS, as the judge would score
that text alone; its entropy and the generation's perplexity follow."""

import math
from pathlib import Path

import pytest
import torch

from xdllm.data.tokenizer import builtin_tokenizer
from xdllm.errors import XdllmError
from xdllm.evaluate.generative_perplexity import GenerativeJudge, judged_results, token_entropy
from xdllm_models.arlm.model import causal_rotary_transformer

TOKENIZER = builtin_tokenizer()
PAD, MASK, BOS, EOS = (TOKENIZER.pad_token_id, TOKENIZER.mask_token_id, TOKENIZER.bos_token_id,
                       TOKENIZER.eos_token_id)


def _judge(max_positions: int = 32) -> GenerativeJudge:
    torch.manual_seed(0)
    model = causal_rotary_transformer(vocab_size=TOKENIZER.vocab_size, d_model=32, n_layers=2, n_heads=2,
                                      max_positions=max_positions).eval()
    return GenerativeJudge(model, TOKENIZER, Path("judge.ckpt"), max_positions)


def _alone(judge: GenerativeJudge, prompt: list[int], text: list[int]) -> float:
    """The judge's NLL of ``text`` after ``[bos] + prompt``, the sequence run alone (no padding)."""
    sequence = torch.tensor([[BOS, *prompt, *text]])
    with torch.no_grad():
        log_probs = judge.model(sequence).float().log_softmax(-1)[0]
    start = 1 + len(prompt)
    return -sum(float(log_probs[i - 1, sequence[0, i]]) for i in range(start, sequence.shape[1]))


def _batch(prompts: list[list[int]], outputs: list[list[int]]) -> tuple[dict, dict]:
    """Left-padded ``[bos] + prompt`` rows and canvases holding them followed by the outputs."""
    width = 1 + max(len(prompt) for prompt in prompts)
    input_ids = torch.tensor([[PAD] * (width - 1 - len(p)) + [BOS, *p] for p in prompts])
    ids = torch.cat([input_ids, torch.tensor(outputs)], dim=1)
    return ({"input_ids": input_ids, "attention_mask": input_ids != PAD},
            {"ids": ids, "output_start_idx": torch.full((len(prompts),), width)})


def test_scores_each_output_through_its_first_eos_as_the_judge_scores_it_alone():
    judge = _judge()
    prompts = [[4, 5, 6], [7], []]
    outputs = [[8, 9, EOS, EOS, EOS, EOS],     # EOS fill after the text: not scored
               [10, 11, 12, 13, 14, 15],      # no EOS: scored whole
               [EOS, 5, 6, EOS, 7, EOS]]      # text after an early EOS: not scored
    texts = [[8, 9, EOS], [10, 11, 12, 13, 14, 15], [EOS]]
    batch, prediction = _batch(prompts, outputs)
    judged = judge.score(batch, prediction)
    assert judged.tokens == [3, 6, 1]
    expected = [_alone(judge, prompt, text) for prompt, text in zip(prompts, texts)]
    assert judged.nll == pytest.approx(expected, rel=1e-4)
    assert judged.entropy == pytest.approx([math.log(2), math.log(6), 0.0])  # the text's tokens, EOS left out
    assert judged.ended == [True, False, True]  # the second was cut by the canvas


def test_sums_records_and_the_generation_perplexity():
    judge = _judge()
    batch, prediction = _batch([[4], [5]], [[6, 6, EOS], [7, 8, 9]])
    judged = judge.score(batch, prediction)
    sums = judged.sums(torch.device("cpu"))
    assert float(sums["gen_nll"][0]) == pytest.approx(sum(judged.nll)) and float(sums["gen_nll"][1]) == 6
    assert float(sums["gen_entropy"][1]) == 2
    assert [float(value) for value in sums["gen_ended"]] == [1, 2]  # one of two outputs ended
    records = [{}, {}]
    judged.add_to(records)
    assert records[0]["gen_nll"] == pytest.approx(judged.nll[0] / 3) and records[1]["gen_tokens"] == 3
    assert records[0]["gen_entropy"] == 0.0  # "6 6": one token twice
    assert (records[0]["gen_ended"], records[1]["gen_ended"]) == (True, False)
    results = judged_results({"gen_nll": 2.0, "gen_entropy": 1.5, "gen_ended": 0.5, "exact_match": 1.0})
    assert results == pytest.approx({"gen_nll": 2.0, "gen_ppl": math.exp(2.0), "gen_entropy": 1.5, "gen_ended": 0.5})
    assert judged_results({"exact_match": 1.0}) == {}


def test_token_entropy():
    assert token_entropy([]) == 0.0
    assert token_entropy([3, 3, 3]) == 0.0
    assert token_entropy([1, 2, 1, 2]) == pytest.approx(math.log(2))


def test_refuses_infilling_prompts_and_sequences_past_its_positions():
    batch, prediction = _batch([[4, MASK, 6]], [[7, EOS]])
    with pytest.raises(XdllmError, match="masks in its prompt"):
        _judge().score(batch, prediction)
    batch, prediction = _batch([[4, 5, 6]], [[7, 8, 9, 10, 11]])
    with pytest.raises(XdllmError, match="is 9 tokens with bos, prompt and output; the judge judge.ckpt has "
                                         "max_positions=8"):
        _judge(max_positions=8).score(batch, prediction)
