"""Sudoku: the solver, unique-solution puzzles, the task's scores and their path into metrics."""

import hashlib
import json
import random

import pytest
import torch
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.data.builtin_tasks import SudokuTask
from xdllm.data.sudoku import CELLS, count_solutions, follows_rules, make_puzzle, random_solution
from xdllm.data.tasks import draw_sample, get_task
from xdllm.data.tokenizer import builtin_tokenizer
from xdllm.evaluate.answers import AnswerEvaluator
from xdllm.evaluate.task_scores import TaskScoredEvaluator

SOLVED = [int(c) for c in
          "534678912672195348198342567859761423426853791713924856961537284287419635345286179"]


def test_solver_counts_solutions_and_rejects_repeated_givens():
    assert follows_rules(SOLVED)
    assert count_solutions(SOLVED) == 1
    # a rectangle of cells holding a/b and b/a in two rows of one band: blanking it leaves both
    # orders possible, so exactly two solutions
    rectangle = next([r1 * 9 + c1, r1 * 9 + c2, r2 * 9 + c1, r2 * 9 + c2]
                     for r1 in range(9) for r2 in range(r1 + 1, r1 // 3 * 3 + 3)
                     for c1 in range(9) for c2 in range(c1 + 1, 9)
                     if SOLVED[r1 * 9 + c1] == SOLVED[r2 * 9 + c2]
                     and SOLVED[r1 * 9 + c2] == SOLVED[r2 * 9 + c1])
    two = [0 if cell in rectangle else value for cell, value in enumerate(SOLVED)]
    assert count_solutions(two, limit=10) == 2
    # excluding a blank's digit counts the solutions where it holds another: the other order only
    corner = rectangle[0]
    other = []
    assert count_solutions(two, limit=10, solution=other, excluded=(corner, SOLVED[corner])) == 1
    assert other[corner] != SOLVED[corner] and follows_rules(other)
    assert count_solutions(SOLVED[:corner] + [0] + SOLVED[corner + 1:], excluded=(corner, SOLVED[corner])) == 0
    for excluded in ((corner, 0), (81, 1), (0, SOLVED[0])):  # not a digit, not a cell, not blank
        with pytest.raises(ValueError, match=r"excluded must be \(a blank cell of the grid, a digit 1-9\)"):
            count_solutions(two, excluded=excluded)
    bad = [0] * CELLS
    bad[0] = bad[1] = 7
    assert count_solutions(bad) == 0
    with pytest.raises(ValueError, match="81 values in 0..9"):
        count_solutions([0] * 80)


def test_random_solutions_follow_the_rules_and_differ():
    rng = random.Random(0)
    grids = [random_solution(rng) for _ in range(5)]
    assert all(follows_rules(grid) for grid in grids)
    assert len({tuple(grid) for grid in grids}) == 5
    broken = list(grids[0])
    broken[0], broken[1] = broken[1], broken[0]
    assert not follows_rules(broken)


@pytest.mark.parametrize("givens", [30, 45, 70])
def test_puzzles_have_the_asked_givens_and_one_solution(givens):
    rng = random.Random(givens)
    for _ in range(5):
        puzzle, solution = make_puzzle(rng, givens)
        assert sum(1 for value in puzzle if value) == givens
        assert all(value in (0, solution[cell]) for cell, value in enumerate(puzzle))
        found = []
        assert count_solutions(puzzle, limit=2, solution=found) == 1
        assert found == solution


def test_puzzles_are_the_ones_every_earlier_version_drew():
    """The held-out sets and the recorded experiments depend on the exact puzzles a seed gives:
    a faster generator must make the same ones (digest of the generator before the blanking
    shortcuts)."""
    digest = hashlib.sha256()
    for givens in (25, 30, 50):
        for seed in range(10):
            puzzle, solution = make_puzzle(random.Random(seed), givens)
            digest.update(bytes(puzzle + solution))
    assert digest.hexdigest() == "e55e76b711b650413d8d5a4d231a8739ae0275f34cf0d2f6618f1eb08ebdc81c"


def test_task_samples_are_deterministic_and_validated():
    task = get_task("sudoku", num_givens=40)
    first = draw_sample(task, "test", 3, seed=7)
    assert first == draw_sample(task, "test", 3, seed=7) != draw_sample(task, "test", 4, seed=7)
    prompt, target = first
    assert len(prompt) == len(target) == 81 and prompt.count("0") == 41
    with pytest.raises(ValueError, match=r"num_givens must be in \[17, 81\], got 10"):
        SudokuTask(num_givens=10)


def test_answer_scores_separate_solved_blank_accuracy_and_rule_validity():
    task = SudokuTask(num_givens=40)
    prompt, target = task.generate(random.Random(3))
    blanks = [cell for cell, symbol in enumerate(prompt) if symbol == "0"]
    assert task.answer_scores(prompt, target, target) == {
        "solved": (1.0, 1.0), "blank_accuracy": (41.0, 41.0), "rule_valid": (1.0, 1.0)}
    relabelled = [str(10 - int(symbol)) for symbol in target]  # a valid grid, but not this puzzle's
    scores = task.answer_scores(prompt, target, relabelled)
    assert scores["solved"] == (0.0, 1.0) and scores["rule_valid"] == (1.0, 1.0)
    one_wrong = list(target)
    one_wrong[blanks[0]] = "<mask>"
    assert task.answer_scores(prompt, target, one_wrong) == {
        "solved": (0.0, 1.0), "blank_accuracy": (40.0, 41.0), "rule_valid": (0.0, 1.0)}
    assert task.answer_scores(prompt, target, target[:10])["blank_accuracy"][1] == 41.0


def test_scored_evaluator_adds_sums_and_record_fields():
    tokenizer = builtin_tokenizer()
    task = SudokuTask(num_givens=60)
    pairs = [task.generate(random.Random(seed)) for seed in (1, 2)]
    prompt_ids = torch.tensor([tokenizer.encode(" ".join(p)) for p, _ in pairs])
    target_ids = torch.tensor([tokenizer.encode(" ".join(t)) for _, t in pairs])
    outputs = target_ids.clone()
    outputs[1, [c for c, s in enumerate(pairs[1][0]) if s == "0"][:3]] = tokenizer.encode("0")[0]
    batch = {"input_ids": prompt_ids, "attention_mask": torch.ones_like(prompt_ids), "target_ids": target_ids}
    prediction = {"ids": torch.cat([prompt_ids, outputs], dim=1), "output_start_idx": torch.tensor([81, 81]),
                  "text": [tokenizer.decode(row) for row in outputs.tolist()],
                  "steps_taken": [81, 81], "time_taken": [0.1, 0.1]}
    evaluator = TaskScoredEvaluator(AnswerEvaluator(tokenizer), task, tokenizer)
    metrics = evaluator.prediction_metrics(batch, prediction)
    assert metrics["solved"][0].item() == 1.0 and metrics["solved"][1].item() == 2.0
    assert metrics["blank_accuracy"][0].item() == 21 + 18 and metrics["blank_accuracy"][1].item() == 42
    assert metrics["exact_match"][0].item() == 1.0
    records = evaluator.records(batch, prediction)
    assert [r["solved"] for r in records] == [1.0, 0.0]
    assert records[1]["blank_accuracy"] == pytest.approx(18 / 21)


def test_sudoku_runs_end_to_end_with_its_metrics(tmp_path, capsys):
    run = tmp_path / "run"
    overrides = [*(o for o in TINY if not o.startswith("task.params")), "task=sudoku",
                 "task.params.num_givens=70", "trainer.max_steps=2",
                 "data.num_val_samples=4", "data.num_test_samples=4", f"run_dir={run}"]
    assert main(["train", *overrides]) == 0
    capsys.readouterr()
    assert main(["generate", f"ckpt={run}", "history=topk", "history_tensorboard_samples=1"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])
    assert {"solved", "blank_accuracy", "rule_valid"} <= result.keys()
    assert 0.0 <= result["blank_accuracy"] <= 1.0
    predictions = sorted(run.glob("generate/*/predictions.jsonl"))[-1]
    records = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert len(records) == 4
    assert all({"solved", "blank_accuracy", "rule_valid"} <= record.keys() for record in records)
    assert len(list(predictions.parent.glob("history/*.grid.png"))) == 1  # the 9x9 picture
