"""Multiple-choice scoring by likelihood: ``xdllm eval prompts_file=<choices .jsonl>``."""

import json

import pytest
import torch
from tiny_run import TINY_MLM, TINY_RUN, TINY_TEXT

import xdllm
from xdllm.cli.main import main
from xdllm.data.builtin_tasks import SudokuTask
from xdllm.data.named_collate import NamedCollate
from xdllm.data.tokenizer import builtin_tokenizer
from xdllm.errors import XdllmError
from xdllm.evaluate import AnswerEvaluator
from xdllm.evaluate.task_scores import TaskScoredEvaluator
from xdllm.run.choice_file import ChoiceFile
from xdllm.run.choice_scores import choice_accuracy, collated_choices, sample_nll_of, without_scores_on_context
from xdllm_models.arlm.metrics import ARLMEvaluator
from xdllm_models.mlm.metrics import MLMEvaluator

RIGHT, WRONG = "1 2 3 4", "4 3 2 1"


def _train(tmp_path_factory, experiment: str, *overrides: str):
    run_dir = tmp_path_factory.mktemp(experiment) / "run"
    assert main(["train", f"experiment={experiment}", *TINY_RUN[1:], *TINY_MLM, "trainer.max_steps=4",
                 "trainer.val_check_interval=2", f"run_dir={run_dir}", *overrides]) == 0
    return run_dir


@pytest.fixture(scope="module")
def mdlm_run(tmp_path_factory):
    return _train(tmp_path_factory, "sort_mdlm")


@pytest.fixture(scope="module")
def arlm_run(tmp_path_factory):
    return _train(tmp_path_factory, "sort_arlm")


def _write(path, questions):
    path.write_text("".join(json.dumps(question) + "\n" for question in questions))
    return path


def _summary(capsys, *args):
    capsys.readouterr()
    assert main(["eval", *args]) == 0
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


def _questions(n=6):
    prompts = ["4 3 2 1", "2 1 4 3", "3 3 1 2", "9 8 7 6", "5 0 5 0", "7 1 7 1"]
    answers = [" ".join(sorted(prompt.split())) for prompt in prompts]
    return [{"prompt": prompt, "choices": [prompt, answer, "0 0 0 0"], "answer": 1}
            for prompt, answer in zip(prompts[:n], answers)]


def test_the_right_choice_must_score_strictly_lowest_and_normalised_scores_do_not_favour_short_choices():
    # question 0: right by total and per token; 1: a tie counts as wrong; 2: the long right choice
    # loses on its total, wins per token and per character
    texts = [("q0", ["a b", "c d"]), ("q1", ["e f", "g h"]), ("q2", ["i", "j", "k l m n o p q"])]
    choices = ChoiceFile(examples=[], questions=[0, 0, 1, 1, 2, 2, 2], answers=[1, 0, 2], places=[], context=[0] * 7,
                         texts=texts, sha256="")
    nll = torch.tensor([5.0, 1.0, 2.0, 2.0, 3.0, 3.5, 4.0], dtype=torch.float64)
    tokens = torch.tensor([2, 2, 2, 2, 1, 1, 8])
    scores = choice_accuracy(nll, tokens, choices)
    assert scores["questions"] == 3
    assert scores["choice_accuracy"] == pytest.approx(1 / 3)
    assert scores["choice_accuracy_per_token"] == pytest.approx(2 / 3)
    assert scores["choice_accuracy_per_char"] == pytest.approx(2 / 3)  # 4/13 chars against 3/1 and 3.5/1
    assert scores["chance"] == pytest.approx((1 / 2 + 1 / 2 + 1 / 3) / 3)
    assert scores["answer_nll"] == pytest.approx((0.5 + 1.0 + 0.5) / 3)
    longer = ChoiceFile(examples=[], questions=[0, 0], answers=[1], places=[], context=[0] * 2,
                        texts=[("q", ["ab", "cdefgh"])], sha256="")  # the same tokens, three times the characters
    two = choice_accuracy(torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([2, 2]), longer)
    assert (two["choice_accuracy_per_token"], two["choice_accuracy_per_char"]) == (0.0, 1.0)


def test_a_choice_s_bound_does_not_depend_on_the_batch_the_order_or_the_other_choices(mdlm_run, tmp_path, capsys):
    questions = _questions()
    together = _summary(capsys, f"ckpt={mdlm_run}", f"prompts_file={_write(tmp_path / 'a.jsonl', questions)}")
    assert together["questions"] == 6 and together["chance"] == pytest.approx(1 / 3)
    alone = [{**question, "choices": question["choices"][1:2] + ["0 0 0 0"], "answer": 0} for question in questions]
    reordered = [{**question, "choices": question["choices"][::-1], "answer": 1} for question in questions]
    for variant, name in ((alone, "b"), (reordered, "c")):
        summary = _summary(capsys, f"ckpt={mdlm_run}", f"prompts_file={_write(tmp_path / f'{name}.jsonl', variant)}",
                           "batch_size=2")
        assert summary["answer_nll"] == pytest.approx(together["answer_nll"], rel=1e-6)
    assert _summary(capsys, f"ckpt={mdlm_run}", f"prompts_file={tmp_path / 'c.jsonl'}", "batch_size=2",
                    )["choice_accuracy"] == together["choice_accuracy"]


def test_choices_of_a_question_share_their_noise_so_twins_tie_and_count_as_wrong(mdlm_run, tmp_path, capsys):
    twins = [{"prompt": "4 3 2 1", "choices": [RIGHT, RIGHT], "answer": 0}]
    summary = _summary(capsys, f"ckpt={mdlm_run}", f"prompts_file={_write(tmp_path / 'twins.jsonl', twins)}")
    assert summary["choice_accuracy"] == 0.0 and summary["choice_accuracy_per_token"] == 0.0


def test_more_noise_levels_change_the_bound_and_generate_refuses_them(mdlm_run, tmp_path, capsys):
    path = _write(tmp_path / "q.jsonl", _questions())
    default = _summary(capsys, f"ckpt={mdlm_run}", f"prompts_file={path}")
    more = _summary(capsys, f"ckpt={mdlm_run}", f"prompts_file={path}", "evaluator.num_levels=9")
    assert more["answer_nll"] != pytest.approx(default["answer_nll"], rel=1e-6)
    assert more["evaluator"] == {"num_levels": 9} and "evaluator" not in default  # the summary says what it used
    assert main(["generate", f"ckpt={mdlm_run}", "evaluator.num_levels=9", "num_samples=2"]) == 2
    assert "evaluator options change the likelihood figures of xdllm eval" in capsys.readouterr().err
    assert main(["eval", f"ckpt={mdlm_run}", f"prompts_file={path}", "evaluator.num_level=9"]) == 2
    assert "did you mean evaluator.num_levels?" in capsys.readouterr().err
    counted = _summary(capsys, f"ckpt={mdlm_run}", f"prompts_file={path}", "evaluator.estimator=count")
    assert counted["answer_nll"] != pytest.approx(default["answer_nll"], rel=1e-6)
    assert main(["eval", f"ckpt={mdlm_run}", f"prompts_file={path}", "evaluator.estimator=counts"]) == 2
    assert "estimator must be one of time, count, got 'counts'" in capsys.readouterr().err


def test_the_split_s_bound_follows_the_evaluator_options(mdlm_run, capsys):
    default = _summary(capsys, f"ckpt={mdlm_run}", "num_samples=8")
    more = _summary(capsys, f"ckpt={mdlm_run}", "num_samples=8", "evaluator.num_levels=9")
    assert more["nll_bound"] != pytest.approx(default["nll_bound"], rel=1e-6)
    assert more["loss"] == default["loss"]


def test_an_arlm_choice_scores_its_exact_nll_as_eval_of_the_pair_does(arlm_run, tmp_path, capsys):
    question = {"prompt": "4 3 2 1", "choices": [WRONG, RIGHT], "answer": 1}
    choices = _summary(capsys, f"ckpt={arlm_run}", f"prompts_file={_write(tmp_path / 'q.jsonl', [question])}")
    pair = _write(tmp_path / "pair.jsonl", [{"prompt": "4 3 2 1", "response": RIGHT}])
    assert choices["answer_nll"] == pytest.approx(_summary(capsys, f"ckpt={arlm_run}", f"prompts_file={pair}")["nll"])


def test_choice_scores_from_python_and_their_records_per_question(mdlm_run, tmp_path, capsys):
    path = _write(tmp_path / "q.jsonl", _questions())
    scores = xdllm.evaluate_run(mdlm_run, prompts_file=path, evaluator={"num_levels": 3})
    assert scores == _summary(capsys, f"ckpt={mdlm_run}", f"prompts_file={path}", "evaluator.num_levels=3")
    records = xdllm.score_choices(mdlm_run, path, evaluator={"num_levels": 3})
    assert [record["line"] for record in records] == [f"{path.resolve()}:{n}" for n in range(1, 7)]
    assert records[0]["choices"] == _questions()[0]["choices"] and records[0]["answer"] == 1
    assert sum(record["right"] for record in records) / 6 == scores["choice_accuracy"]
    right_nll = [record["nll"][1] / record["tokens"][1] for record in records]
    assert sum(right_nll) / 6 == pytest.approx(scores["answer_nll"])
    assert all(record["nll"][record["picked"]] == min(record["nll"]) for record in records)
    assert len(xdllm.score_choices(mdlm_run, path, num_questions=2)) == 2
    with pytest.raises(XdllmError, match=r"num_samples=7 is more than the 6 questions of prompts_file .*: give "
                                         r"num_samples=6 or less"):  # scored the 6 without a word
        xdllm.score_choices(mdlm_run, path, num_questions=7)
    with pytest.raises(XdllmError, match="is not a multiple-choice .jsonl file"):
        xdllm.score_choices(mdlm_run, _write(tmp_path / "pairs.jsonl", [{"prompt": "1 2", "response": "1 2"}]))


def test_eval_writes_the_records_per_question_where_choice_records_says(mdlm_run, tmp_path, capsys):
    path, records = _write(tmp_path / "q.jsonl", _questions()), tmp_path / "out" / "records.jsonl"
    summary = _summary(capsys, f"ckpt={mdlm_run}", f"prompts_file={path}", "evaluator.num_levels=3",
                       f"choice_records={records}")
    assert summary["choice_records"] == str(records)
    written = [json.loads(line) for line in records.read_text().splitlines()]
    assert written == xdllm.score_choices(mdlm_run, path, evaluator={"num_levels": 3})
    assert sum(record["right"] for record in written) / 6 == summary["choice_accuracy"]
    assert [p.name for p in records.parent.iterdir()] == ["records.jsonl"]  # no temporary left beside it


@pytest.mark.parametrize("where, prompts, said", [
    ("records.jsonl", None, "choice_records={records} writes the records of a multiple-choice prompts_file's "
                            "questions, and split=test has none"),
    ("records.jsonl", "pairs", "and prompts_file={pairs} has no choices"),
    ("records.jsonl", "missing", "prompts_file not found: {missing}"),
    ("taken.jsonl", "questions", "{records}: {records} exists and eval does not overwrite it"),
    ("taken.jsonl/records.jsonl", "questions", "{records}: {taken} is a file, not a folder"),
])
def test_choice_records_is_refused_before_anything_is_scored(mdlm_run, tmp_path, capsys, where, prompts, said):
    files = {"questions": _write(tmp_path / "q.jsonl", _questions(1)), "missing": tmp_path / "missing.jsonl",
             "pairs": _write(tmp_path / "pairs.jsonl", [{"prompt": "1 2", "response": "1 2"}])}
    taken = tmp_path / "taken.jsonl"
    taken.write_text("mine\n")
    records = tmp_path / where
    given = [f"prompts_file={files[prompts]}"] if prompts else []
    assert main(["eval", f"ckpt={mdlm_run}", *given, f"choice_records={records}"]) == 2
    assert said.format(records=records, taken=taken, **files) in capsys.readouterr().err
    assert taken.read_text() == "mine\n" and not (tmp_path / "records.jsonl").exists()


def test_generate_refuses_choice_records_naming_eval(mdlm_run, tmp_path, capsys):
    assert main(["generate", f"ckpt={mdlm_run}", f"choice_records={tmp_path / 'r.jsonl'}"]) == 2
    assert "are written by xdllm eval, which scores the choices" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("line, said", [
    ('{"prompt": "1 2", "choices": ["1 2"], "answer": 0}', "'choices' must be a list of two or more strings"),
    ('{"prompt": "1 2", "choices": ["1 2", 3], "answer": 0}', "'choices' must be a list of two or more strings"),
    ('{"prompt": "1 2", "choices": ["1 2", "2 1"], "answer": 2}', "an integer in [0, 2), got 2"),
    ('{"prompt": "1 2", "choices": ["1 2", "2 1"], "answer": true}', "an integer in [0, 2), got true"),
    ('{"prompt": "1 2", "choices": ["1 2", "2 1"]}', "'answer' must be the index of the right choice"),
    ('{"choices": ["1 2", "2 1"], "answer": 0}', "no string 'prompt'"),
    ('{"prompt": "1 2", "choices": ["1 2", "@"], "answer": 0}', "choice 1: the response: SymbolTokenizer.encode"),
    ("not json", "not valid JSON"),
])
def test_a_bad_question_is_refused_naming_its_line(mdlm_run, tmp_path, capsys, line, said):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_questions(1)[0]) + "\n\n" + line + "\n")
    assert main(["eval", f"ckpt={mdlm_run}", f"prompts_file={path}"]) == 2
    error = capsys.readouterr().err
    assert f"{path}:3" in error and said in error


def test_an_mlm_run_scores_choices_by_the_bound_of_its_denoiser(trained_mlm_run, tmp_path, capsys):
    path = _write(tmp_path / "q.jsonl", _questions())
    summary = _summary(capsys, f"ckpt={trained_mlm_run}", f"prompts_file={path}")
    assert summary["questions"] == 6 and summary["answer_nll"] > 0
    more = _summary(capsys, f"ckpt={trained_mlm_run}", f"prompts_file={path}", "evaluator.num_levels=9")
    assert more["answer_nll"] != pytest.approx(summary["answer_nll"], rel=1e-6)


def test_the_mlm_bound_refuses_packed_rows():
    packed = {"input_ids": torch.zeros(1, 4, dtype=torch.long), "target_ids": torch.zeros(1, 4, dtype=torch.long),
              "segment_ids": torch.zeros(1, 4, dtype=torch.long), "positions": torch.arange(4)[None]}
    with pytest.raises(ValueError, match="this val collator gives packed rows"):
        MLMEvaluator(builtin_tokenizer()).sample_nll(torch.nn.Identity(), packed)


def test_choices_refuse_generation_options_and_families_without_a_likelihood(mdlm_run, old_mlm_run, tmp_path, capsys):
    path = _write(tmp_path / "q.jsonl", _questions(1))
    assert main(["eval", f"ckpt={mdlm_run}", f"prompts_file={path}", "predictor.max_steps=2"]) == 2
    assert "generates nothing, so predictor.max_steps does not apply" in capsys.readouterr().err
    assert main(["eval", f"ckpt={old_mlm_run}", f"prompts_file={path}"]) == 2
    assert ("the mlm family's evaluator has no likelihood of a response (an mlm run trained before its evaluator had "
            "one: give evaluator._target_=xdllm_models.mlm.metrics.MLMEvaluator)") in capsys.readouterr().err
    assert main(["generate", f"ckpt={mdlm_run}", f"prompts_file={path}"]) == 2
    assert f"{path}:1: a multiple-choice line" in capsys.readouterr().err


@pytest.fixture(scope="module")
def trained_mlm_run(tmp_path_factory):
    return _train(tmp_path_factory, "sort_mlm")


@pytest.fixture(scope="module")
def old_mlm_run(tmp_path_factory):
    """An mlm run as trained before its evaluator had a likelihood."""
    return _train(tmp_path_factory, "sort_mlm", "evaluator._target_=xdllm.evaluate.AnswerEvaluator",
                  "~evaluator.num_levels", "~evaluator.eps", "~evaluator.seed", "~evaluator.estimator")


def test_a_task_scored_evaluator_scores_choices_with_its_family_evaluator():
    tokenizer = builtin_tokenizer()
    family = ARLMEvaluator(tokenizer)
    assert sample_nll_of(TaskScoredEvaluator(family, SudokuTask(), tokenizer)) == family.sample_nll
    assert sample_nll_of(TaskScoredEvaluator(AnswerEvaluator(tokenizer), SudokuTask(), tokenizer)) is None


@pytest.fixture(scope="module")
def text_arlm_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("text_arlm") / "run"
    assert main(["train", "experiment=text_arlm", *TINY_TEXT, "task.params.max_tokens=40", "arlm.target_length=48",
                 "model.max_positions=64", "generate_after_train=false", f"run_dir={run_dir}"]) == 0
    return run_dir


def test_a_free_text_run_scores_a_choice_as_the_end_of_a_document_that_starts_with_the_prompt(text_arlm_run, tmp_path,
                                                                                           capsys):
    prompt, choice = "sam went to the park with his bird .", " then sam left the park ."
    question = {"prompt": prompt, "choices": [choice, " then mia left the hill ."], "answer": 0}
    summary = _summary(capsys, f"ckpt={text_arlm_run}", f"prompts_file={_write(tmp_path / 'q.jsonl', [question])}")
    run = xdllm.load_trained(text_arlm_run)
    tokenizer = run.tokenizer
    given, scored = tokenizer.encode(prompt), [*tokenizer.encode(choice), tokenizer.eos_token_id]
    fill = [tokenizer.eos_token_id] * (48 - len(given) - len(scored))  # the document's EOS fill to 48 slots
    document = torch.tensor([[tokenizer.bos_token_id, *given, *scored, *fill]])
    with torch.no_grad():
        log_probs = run.model(document).log_softmax(-1)[0, :-1].gather(1, document[0, 1:, None])[:, 0]
    # -log p(choice, eos, fill | bos, prompt), per token of the choice and its eos
    expected = -log_probs[len(given):].sum().item() / len(scored)
    assert summary["answer_nll"] == pytest.approx(expected, rel=1e-5)


def test_context_tokens_leave_the_loss_mask_and_nothing_else():
    batch = {"loss_mask": torch.tensor([[0, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]]),
             "target_ids": torch.arange(12).view(2, 6)}
    out = without_scores_on_context(batch, [2, 0])
    assert out["loss_mask"].tolist() == [[0, 0, 0, 1, 1, 0], [1, 1, 1, 0, 0, 0]]
    assert out["target_ids"] is batch["target_ids"] and batch["loss_mask"][0, 1] == 1  # the input is not changed


def test_a_prompt_and_choice_past_the_model_s_positions_are_refused_naming_the_line(mdlm_run, tmp_path, capsys):
    long = {"prompt": " ".join(["1"] * 600), "choices": [RIGHT, WRONG], "answer": 0}
    path = _write(tmp_path / "long.jsonl", [*_questions(1), long])
    assert main(["eval", f"ckpt={mdlm_run}", f"prompts_file={path}"]) == 2
    error = capsys.readouterr().err
    assert f"{path}:2: the prompt with a choice takes" in error and "the model has max_positions=" in error


def test_a_val_collator_s_refusal_names_the_lines_of_its_batch():
    choices = ChoiceFile(examples=[{}] * 5, questions=[0, 0, 1, 1, 2], answers=[0, 0, 0],
                         places=["q.jsonl:1", "q.jsonl:1", "q.jsonl:3", "q.jsonl:3", "q.jsonl:4"], context=[0] * 5,
                         texts=[], sha256="")

    def too_long(examples):
        raise ValueError("sample 1 needs more positions")

    refusing = NamedCollate(too_long, "collator.val")
    with pytest.raises(XdllmError, match=r"^q\.jsonl:1 to 3 \(one batch of choices, batch_size=4\): collator\.val"):
        collated_choices(refusing, choices, 0, 4)
    with pytest.raises(XdllmError, match=r"^q\.jsonl:4 \(one batch of choices, batch_size=4\)"):
        collated_choices(refusing, choices, 4, 4)
