"""``validation_choices=``: a multiple-choice file scored at every validation of a training run."""

import json
import logging

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY_MLM, TINY_RUN

from xdllm.cli.main import main

QUESTIONS = [{"prompt": prompt, "choices": [prompt, " ".join(sorted(prompt.split())), "0 0 0 0"], "answer": 1}
             for prompt in ("4 3 2 1", "2 1 4 3", "3 3 1 2", "9 8 7 6")]


def _questions(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(question) + "\n" for question in QUESTIONS))
    return path


def _train(run_dir, *overrides):
    return main(["train", "experiment=sort_mdlm", *TINY_RUN[1:], *TINY_MLM, "trainer.max_steps=4",
                 "trainer.val_check_interval=2", f"run_dir={run_dir}", *overrides])


def test_every_validation_logs_the_choice_scores_that_eval_gives_for_its_weights(tmp_path, capsys):
    path, run_dir = _questions(tmp_path), tmp_path / "run"
    capsys.readouterr()
    assert _train(run_dir, f"validation_choices={path}", "checkpoint.monitor=val/choice_accuracy",
                  "generate_after_train=true") == 0
    out = capsys.readouterr().out
    after_training = json.loads(out[out.index("{"):])["validation_choices"]  # the best checkpoint's
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert [s.step for s in events.Scalars("val/choice_accuracy")] == [2, 4]
    logged = {tag: events.Scalars(f"val/{tag}")[-1].value
              for tag in ("answer_nll", "choice_accuracy", "choice_accuracy_per_token", "choice_accuracy_per_char")}
    capsys.readouterr()
    assert main(["eval", f"ckpt={run_dir / 'checkpoints' / 'last.ckpt'}", f"prompts_file={path}"]) == 0
    out = capsys.readouterr().out
    scores = json.loads(out[out.index("{"):])
    assert logged["answer_nll"] == pytest.approx(scores["answer_nll"], rel=1e-5)
    for name in ("choice_accuracy", "choice_accuracy_per_token", "choice_accuracy_per_char"):
        assert logged[name] == pytest.approx(scores[name])
    assert "mode: max" in (run_dir / "config.yaml").read_text()  # a higher accuracy is the better checkpoint
    assert main(["eval", f"ckpt={run_dir}", f"prompts_file={path}"]) == 0  # best.ckpt
    out = capsys.readouterr().out
    best = json.loads(out[out.index("{"):])
    assert after_training == {key: best[key] for key in after_training} and after_training["questions"] == 4


def test_under_autocast_the_logged_scores_are_still_eval_s(tmp_path, capsys, monkeypatch):
    """A bf16 run scores its choices under bf16 autocast on CUDA, at validation as in eval;
    here the CPU stands in for CUDA (its autocast runs bf16 too)."""
    def cpu_as_cuda(precision, device):
        return torch.bfloat16 if str(precision).startswith("bf16") else None

    monkeypatch.setattr("xdllm.run.choice_scores.autocast_dtype", cpu_as_cuda)
    monkeypatch.setattr("xdllm.run.generate.autocast_dtype", cpu_as_cuda)
    path, run_dir = _questions(tmp_path), tmp_path / "run"
    assert _train(run_dir, f"validation_choices={path}", "trainer.precision=bf16-mixed") == 0
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    logged = events.Scalars("val/answer_nll")[-1].value
    capsys.readouterr()
    assert main(["eval", f"ckpt={run_dir / 'checkpoints' / 'last.ckpt'}", f"prompts_file={path}"]) == 0
    out = capsys.readouterr().out
    assert logged == pytest.approx(json.loads(out[out.index("{"):])["answer_nll"], rel=1e-6)  # float32 in the log


@pytest.mark.parametrize("overrides, said", [
    (["validation_choices={missing}"], "multiple-choice file not found: {missing}"),
    (["validation_choices="], "validation_choices= is empty: give a multiple-choice .jsonl file, or null for none"),
    (["model=mlm", "evaluator._target_=xdllm.evaluate.AnswerEvaluator", "~evaluator.num_levels", "~evaluator.eps",
      "~evaluator.seed", "~evaluator.estimator", "validation_choices={questions}"],
     "the mlm family's evaluator has no likelihood of a response"),
])
def test_a_file_that_cannot_be_scored_is_refused_before_the_run_starts(tmp_path, capsys, overrides, said):
    questions, missing, run_dir = _questions(tmp_path), tmp_path / "missing.jsonl", tmp_path / "run"
    filled = [override.format(questions=questions, missing=missing) for override in overrides]
    assert _train(run_dir, *filled) == 2
    assert said.format(missing=missing) in capsys.readouterr().err
    assert not run_dir.exists()


def test_a_resumed_run_says_when_its_questions_changed(tmp_path, caplog):
    path, run_dir = _questions(tmp_path), tmp_path / "run"
    assert _train(run_dir, f"validation_choices={path}") == 0
    with caplog.at_level(logging.WARNING, logger="xdllm.run.train"):
        assert main(["train", f"resume={run_dir}", "trainer.max_steps=6"]) == 0  # the same file: nothing said
    assert "has changed since" not in caplog.text
    path.write_text(path.read_text().replace('"answer": 1', '"answer": 0'))
    with caplog.at_level(logging.WARNING, logger="xdllm.run.train"):
        assert main(["train", f"resume={run_dir}", "trainer.max_steps=8"]) == 0
    assert f"validation_choices={path} has changed since" in caplog.text
    assert "the val/choice_* figures from step 6 on score other questions" in caplog.text
