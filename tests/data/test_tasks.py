import random
import statistics

import pytest

from xdllm.data.builtin_tasks import AdditionTask, SortTask, VarLenCopyTask, VarLenSortTask
from xdllm.data.tasks import TASKS, Task, draw_sample, example, get_task, held_out_keys, sample_rng
from xdllm.data.tokenizer import BUILTIN_SYMBOLS, SymbolTokenizer, builtin_tokenizer


def test_registry_builds_each_task_and_names_the_choices_on_error():
    assert set(TASKS) == {"sort", "addition", "varlen_copy", "varlen_sort", "sudoku", "text_file", "prepared"}
    for name in TASKS.keys() - {"text_file", "prepared"}:  # tests/data/test_text_corpus.py, test_prepared_*.py
        task = get_task(name)
        assert task.name == name
        assert isinstance(task, Task)
    assert get_task("sort", length=3).length == 3
    available = "addition, prepared, sort, sudoku, text_file, varlen_copy, varlen_sort"
    with pytest.raises(ValueError, match=f"unknown task 'nope'; available: {available}"):
        get_task("nope")


def test_sort_target_is_the_sorted_prompt():
    rng = random.Random(0)
    for _ in range(50):
        prompt, target = SortTask(length=8).generate(rng)
        assert len(prompt) == 8 and all(symbol in "0123456789" for symbol in prompt)
        assert target == sorted(prompt)


def test_addition_writes_zero_padded_operands_and_reversed_sum():
    rng = random.Random(1)
    for reverse in (True, False):
        task = AdditionTask(num_digits=3, reverse_sum=reverse)
        for _ in range(50):
            prompt, target = task.generate(rng)
            assert len(prompt) == task.max_prompt_len == 8 and prompt[3] == "+" and prompt[7] == "="
            a, b = int("".join(prompt[:3])), int("".join(prompt[4:7]))
            assert len(target) == task.max_target_len == 4
            written = target[::-1] if reverse else target
            assert int("".join(written)) == a + b
    # 57 + 68 = 125, written 0125 and reversed: 5 2 1 0
    class FixedDraws(random.Random):
        draws = [57, 68]

        def randrange(self, *args):
            return self.draws.pop(0)

    assert AdditionTask(num_digits=3).generate(FixedDraws()) == (list("057+068="), list("5210"))


def test_varlen_copy_is_a_repeated_unit_with_a_long_tailed_length():
    task = VarLenCopyTask(median_length=16, sigma=1.0, min_length=2, max_length=128, max_period=4)
    rng = random.Random(2)
    lengths = []
    for _ in range(2000):
        prompt, target = task.generate(rng)
        assert prompt == []
        assert 2 <= len(target) <= 128
        period = next(p for p in range(1, 5) if all(target[i] == target[i % p] for i in range(len(target))))
        assert period <= 4
        lengths.append(len(target))
    assert 13 <= statistics.median(lengths) <= 19
    assert statistics.mean(lengths) > statistics.median(lengths) + 4  # right tail
    assert max(lengths) > 80
    assert task.max_prompt_len == 0 and task.max_target_len == 128


def test_varlen_sort_sorts_a_long_tailed_number_of_digits():
    task = VarLenSortTask()
    rng = random.Random(3)
    lengths = []
    for _ in range(2000):
        prompt, target = task.generate(rng)
        assert target == sorted(prompt) and len(prompt) == len(target)
        assert 2 <= len(prompt) <= 32
        lengths.append(len(prompt))
    assert 10 <= statistics.median(lengths) <= 14
    assert statistics.mean(lengths) > statistics.median(lengths)  # right tail
    assert max(lengths) >= 28
    with pytest.raises(ValueError, match="VarLenSortTask.max_length"):
        VarLenSortTask(min_length=5, max_length=4)


def test_samples_are_a_pure_function_of_seed_split_and_index():
    tokenizer = builtin_tokenizer()
    task = SortTask()
    first = example(task, tokenizer, "validation", 7, seed=3)
    assert first == example(task, tokenizer, "validation", 7, seed=3)
    assert first != example(task, tokenizer, "validation", 7, seed=4)
    assert first != example(task, tokenizer, "test", 7, seed=3)
    assert first != example(task, tokenizer, "validation", 8, seed=3)
    assert first["sample_index"] == 7 and first["step"] == 0
    assert tokenizer.decode(first["target_ids"]) == " ".join(sorted(tokenizer.decode(first["prompt_ids"]).split()))
    assert example(task, tokenizer, "train", 7, seed=3, step=5)["step"] == 5
    # the generator seed is a stable hash, not Python's salted hash(): fixed across processes
    assert sample_rng(0, "train", 0).random() == sample_rng(0, "train", 0).random()
    assert draw_sample(SortTask(length=4), "train", 0, seed=0) == draw_sample(SortTask(length=4), "train", 0, seed=0)
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        example(task, tokenizer, "dev", 0, seed=0)


def test_training_draws_avoid_the_held_out_samples_deterministically():
    task = SortTask(length=2)  # only 100 distinct samples
    exclude = held_out_keys(task, "validation", seed=0, count=60)
    assert 30 < len(exclude) <= 60
    drawn = [draw_sample(task, "train", index, seed=0, exclude=exclude) for index in range(300)]
    assert all((tuple(prompt), tuple(target)) not in exclude for prompt, target in drawn)
    assert drawn == [draw_sample(task, "train", index, seed=0, exclude=exclude) for index in range(300)]
    unfiltered = [draw_sample(task, "train", index, seed=0) for index in range(300)]
    assert any((tuple(p), tuple(t)) in exclude for p, t in unfiltered)  # the filter did something
    everything = held_out_keys(task, "validation", seed=0, count=5000)
    with pytest.raises(RuntimeError, match="covers nearly the whole task space"):
        draw_sample(task, "train", 0, seed=0, exclude=everything)


def test_tokenizer_that_splits_symbols_is_rejected():
    class SplittingTokenizer(SymbolTokenizer):
        def encode(self, text):
            return super().encode(text) * 2

    with pytest.raises(ValueError, match="turned 3 symbols into 6 tokens.*one token per symbol"):
        example(SortTask(length=3), SplittingTokenizer(BUILTIN_SYMBOLS), "train", 0, seed=0)
