"""UDLM's likelihood: the causal encoder's exact NLL of each response (val/nll, multiple choice)."""

import json

import pytest
import torch
from tiny_run import TINY_MLM, TINY_RUN
from udlm_helpers import examples

from xdllm.cli.main import main
from xdllm.evaluate import MetricTotals
from xdllm.evaluate.evaluation_loss import EvaluationLoss
from xdllm_models.udlm.collator import UDLMCollator
from xdllm_models.udlm.loss import UDLMLoss
from xdllm_models.udlm.metrics import UDLMEvaluator

PROMPTS = [[4, 5, 6], [7], [8, 9, 10, 11, 12]]
TARGETS = [[13, 14, 15, 16, 17, 18], [4, 5], [6, 7, 8, 9, 10, 11, 12, 13, 14]]


def _batch(tokenizer):
    return UDLMCollator(tokenizer, block_size=4, seed=1)(examples(PROMPTS, TARGETS, step=2))


def test_a_response_s_nll_is_the_training_forward_s_encoder_nll_through_the_first_eos(tokenizer, tiny_model):
    batch = _batch(tokenizer)
    with torch.no_grad():
        nll, tokens = UDLMEvaluator(tokenizer).sample_nll(tiny_model, batch)
        # the encoder's next-token log-probabilities as training computes them, over [canvas | encoder row]
        log_probs = UDLMLoss(block_size=4).logits(tiny_model, batch).encoder.float().log_softmax(-1)
    ids, supervised = batch["input_ids"], batch["loss_mask"] != 0
    for row, target in enumerate(TARGETS):
        start = int(supervised[row].int().argmax())
        response = [*target, tokenizer.eos_token_id]  # not the EOS fill to whole blocks after it
        assert ids[row, start:start + len(response)].tolist() == response
        expected = -sum(log_probs[row, i - 1, ids[row, i]] for i in range(start, start + len(response)))
        assert nll[row].item() == pytest.approx(expected.item(), rel=1e-5)
        assert tokens[row].item() == len(response)


def test_validation_reports_the_encoder_nll_and_perplexity(tokenizer, tiny_model):
    batch = _batch(tokenizer)
    evaluator = UDLMEvaluator(tokenizer, encoder_weight=0.5)
    totals = MetricTotals()
    totals.add(evaluator.loss_metrics(tiny_model, batch, EvaluationLoss(UDLMLoss(block_size=4, encoder_weight=0.5))))
    values = evaluator.finalize(totals.means())
    nll, tokens = evaluator.sample_nll(tiny_model, batch)
    assert values["nll"] == pytest.approx(nll.sum().item() / tokens.sum().item(), rel=1e-6)
    assert values["ppl"] == pytest.approx(torch.tensor(values["nll"]).exp().item(), rel=1e-6)


def test_an_encoder_not_trained_as_a_language_model_has_no_likelihood(tokenizer, tiny_model):
    batch = _batch(tokenizer)
    evaluator = UDLMEvaluator(tokenizer, encoder_weight=0.0)
    totals = MetricTotals()
    totals.add(evaluator.loss_metrics(tiny_model, batch, EvaluationLoss(UDLMLoss(block_size=4, encoder_weight=0.0))))
    assert "nll" not in evaluator.finalize(totals.means())
    with pytest.raises(ValueError, match="udlm.encoder_weight=0, not as a language model"):
        evaluator.sample_nll(tiny_model, batch)
    with pytest.raises(ValueError, match="encoder_weight must be >= 0, got -1"):
        UDLMEvaluator(tokenizer, encoder_weight=-1.0)


def _summary(capsys, *args):
    capsys.readouterr()
    assert main(["eval", *args]) == 0
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def test_a_udlm_run_ranks_answer_choices_and_reports_its_nll(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", "experiment=sort_udlm", *TINY_RUN[1:], *TINY_MLM, "trainer.max_steps=4",
                 "trainer.val_check_interval=2", f"run_dir={run_dir}"]) == 0
    split = _summary(capsys, f"ckpt={run_dir}", "split=test")
    assert split["nll"] > 0 and split["ppl"] == pytest.approx(torch.tensor(split["nll"]).exp().item(), rel=1e-6)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"prompt": "4 3 2 1", "choices": ["4 3 2 1", "1 2 3 4"], "answer": 1}) + "\n")
    pair = tmp_path / "pair.jsonl"
    pair.write_text(json.dumps({"prompt": "4 3 2 1", "response": "1 2 3 4"}) + "\n")
    choices = _summary(capsys, f"ckpt={run_dir}", f"prompts_file={questions}")
    assert choices["questions"] == 1 and choices["chance"] == 0.5
    assert choices["answer_nll"] == pytest.approx(_summary(capsys, f"ckpt={run_dir}", f"prompts_file={pair}")["nll"])
