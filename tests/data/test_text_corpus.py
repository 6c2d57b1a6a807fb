"""Real text from a local file: documents, splitting of long lines, held-out exclusion, training."""

import codecs
from pathlib import Path

import pytest
from tiny_run import TINY_MLM, TINY_RUN
from tokenizers import Tokenizer, models, pre_tokenizers

from xdllm.cli.main import main
from xdllm.data import HFTokenizerFile, Task, TextFileTask, TokenizedTask, example, get_task, held_out_keys
from xdllm.data.tasks import draws_ids

CORPUS = """the cat sat on the mat
a dog ran

the bird sang a long song over the hills and far away from the town
"""
WORDS = sorted(set(CORPUS.split()))


def local_tokenizer(tmp_path: Path) -> Path:
    """A word-level Hugging Face tokenizer JSON with xdllm's special tokens, written locally."""
    tokens = ["<pad>", "<mask>", "<bos>", "<eos>", "<unk>", *WORDS]
    tokenizer = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return path


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(CORPUS, encoding="utf-8")
    return path, HFTokenizerFile(local_tokenizer(tmp_path))


def test_each_line_is_a_document_and_long_lines_are_split_not_dropped(corpus):
    path, tokenizer = corpus
    task = TextFileTask(path, tokenizer, max_tokens=5)
    lengths = [len(d) for d in task.documents]
    assert lengths == [5, 1, 3, 5, 5, 5]  # lines of 6, 3 and 15 tokens; the blank line skipped
    flat = [token for document in task.documents for token in document]
    expected = [t for line in CORPUS.splitlines() if line for t in tokenizer.encode(line)]
    assert flat == expected
    assert task.max_target_len == 5 and task.max_prompt_len == 0


def test_a_byte_order_mark_is_not_part_of_the_first_document(corpus, tmp_path):
    """Windows editors start UTF-8 files with a byte-order mark; it used to be tokenized into the
    first document (three byte tokens of a byte-level BPE, an unknown word here)."""
    path, tokenizer = corpus
    marked = tmp_path / "marked.txt"
    marked.write_bytes(codecs.BOM_UTF8 + CORPUS.replace("\n", "\r\n").encode("utf-8"))
    assert TextFileTask(marked, tokenizer).documents == TextFileTask(path, tokenizer).documents


@pytest.mark.parametrize("documents, lengths", [("paragraph", [9, 15]), ("file", [24])])
def test_paragraphs_or_the_whole_file_are_documents(corpus, documents, lengths):
    path, tokenizer = corpus
    task = TextFileTask(path, tokenizer, max_tokens=64, documents=documents)
    assert [len(document) for document in task.documents] == lengths  # the first two lines are one paragraph
    assert task.documents[0][:9] == tuple(tokenizer.encode("the cat sat on the mat\na dog ran"))
    with pytest.raises(ValueError, match="documents must be one of line, paragraph, file, got 'page'"):
        TextFileTask(path, tokenizer, documents="page")


def test_examples_are_token_ids_and_training_avoids_held_out_documents(corpus):
    path, tokenizer = corpus
    task = get_task("text_file", tokenizer=tokenizer, path=str(path), max_tokens=64)
    sample = example(task, tokenizer, "test", 0, seed=3)
    assert sample["prompt_ids"] == [] and tuple(sample["target_ids"]) in task.documents
    # the cheap test of which protocol a task follows agrees with the protocols
    assert draws_ids(task) and isinstance(task, TokenizedTask)
    symbols = get_task("sort", length=3)
    assert not draws_ids(symbols) and not isinstance(symbols, TokenizedTask) and isinstance(symbols, Task)
    held_out = held_out_keys(task, "test", seed=3, count=1)
    for index in range(40):
        drawn = example(task, tokenizer, "train", index, seed=3, exclude=held_out)
        assert ((), tuple(drawn["target_ids"])) not in held_out


def test_missing_empty_or_non_utf8_files_are_clear_errors(tmp_path, corpus):
    _, tokenizer = corpus
    with pytest.raises(FileNotFoundError, match="no such file"):
        TextFileTask(tmp_path / "missing.txt", tokenizer)
    (tmp_path / "blank.txt").write_text("\n  \n")
    with pytest.raises(ValueError, match="no non-empty line"):
        TextFileTask(tmp_path / "blank.txt", tokenizer)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.txt:1: not UTF-8 text \(byte 0xe9 at byte offset 3 of the file\)"):
        TextFileTask(tmp_path / "latin1.txt", tokenizer)
    with pytest.raises(ValueError, match="needs the run's tokenizer"):
        get_task("text_file", path=str(tmp_path / "blank.txt"))


@pytest.mark.slow
def test_train_on_a_local_text_file_with_a_local_tokenizer(corpus, tmp_path, capsys):
    path, tokenizer = corpus
    run_dir = tmp_path / "run"
    overrides = [o for o in TINY_RUN if not o.startswith(("experiment=", "task."))]
    code = main(["train", *overrides, *TINY_MLM, "task=text_file", f"task.params.path={path}",
                 "task.params.max_tokens=8", f"tokenizer={tokenizer.path}", "collator=packed_mlm",
                 "collator.train.row_length=32", "collator.val.row_length=32",
                 "data.num_val_samples=2", "data.num_test_samples=2",
                 "trainer.max_steps=3", "trainer.val_check_interval=3", f"run_dir={run_dir}"])
    assert code == 0, capsys.readouterr().err
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


def test_text_file_without_a_path_is_one_line(capsys):
    assert main(["train", "task=text_file", "trainer.max_steps=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "xdllm: error: task text_file needs a value for task.params.path"
