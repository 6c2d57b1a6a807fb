"""A tokenizer file without xdllm's special tokens is one error line listing every missing one and
the fixes, in ``data prepare`` and in ``train`` (not as a fault of the task)."""

import pytest
import tokenizers
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from xdllm.cli.main import main

MISSING = ("lacks special tokens xdllm needs, not in its vocabulary: pad_token '<pad>', mask_token '<mask>', "
           "bos_token '<bos>', eos_token '<eos>'; train a tokenizer that has them (xdllm tokenizer train CORPUS "
           "-o tokenizer.json), or add them to this file")


@pytest.fixture
def no_special(tmp_path):
    vocabulary = {"[PAD]": 0, "[MASK]": 1, "[UNK]": 2, "a": 3, "b": 4}
    tokenizer = tokenizers.Tokenizer(WordLevel(vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    path = tmp_path / "nospecial.json"
    tokenizer.save(str(path))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b a\nb a b\n" * 8)
    return path, corpus


@pytest.mark.parametrize("command", ["prepare", "train"])
def test_a_tokenizer_without_the_special_tokens_is_one_line_listing_them(command, no_special, tmp_path, capsys):
    path, corpus = no_special
    output = tmp_path / "out"
    argv = (["data", "prepare", str(corpus), "-o", str(output), "--tokenizer", str(path)] if command == "prepare"
            else ["train", "task=text_file", f"task.params.path={corpus}", f"tokenizer={path}", f"run_dir={output}",
                  "torch_threads=1"])
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    prefix = "xdllm: error: data prepare: " if command == "prepare" else "xdllm: error: "
    assert line.startswith(f"{prefix}HFTokenizerFile: {path} {MISSING}"), line
    assert not output.exists()
