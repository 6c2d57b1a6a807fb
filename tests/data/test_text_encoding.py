"""Training text that mentions a special token (``<mask>``, ``<eos>``, ``<pad>``) holds those
characters, not the control tokens: in the text_file task and in ``xdllm data prepare``. A prompt
keeps them special (``<mask>`` asks for infilling)."""

import pytest

from xdllm.cli.main import main
from xdllm.data import HFTokenizerFile, TextFileTask
from xdllm.data.prepared_store import SPLITS, PreparedData
from xdllm.data.text_encoding import SpecialTokenInText, UnencodableText, encode_as_text
from xdllm.data.tokenizer import builtin_tokenizer
from xdllm.data.tokenizer_training import train_tokenizer_file

LINES = ["the tokenizer puts <mask> where a word was hidden", "a story ends with <eos> and then <pad> <pad>",
         "<bos>once upon a time"]


@pytest.fixture
def bpe_file(tmp_path):
    """A byte-level BPE file made by ``xdllm tokenizer train`` (its special tokens marked special)."""
    corpus = tmp_path / "tokenizer_corpus.txt"
    corpus.write_text("\n".join(LINES) + "\n")
    train_tokenizer_file([corpus], tmp_path / "bpe.json", vocab_size=300)
    return tmp_path / "bpe.json"


def test_a_corpus_line_about_special_tokens_is_read_as_text(tmp_path, bpe_file):
    tokenizer = HFTokenizerFile(bpe_file)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(LINES) + "\n")
    task = TextFileTask(corpus, tokenizer, max_tokens=64)
    assert [tokenizer.decode(document) for document in task.documents] == LINES
    assert not any(tokenizer.special_token_ids & set(document) for document in task.documents)
    assert tokenizer.mask_token_id in tokenizer.encode(LINES[0])  # a prompt's <mask> stays the mask token


def test_a_prepared_corpus_holds_the_text_of_special_tokens(tmp_path, bpe_file):
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(LINES * 4) + "\n")
    output = tmp_path / "prepared"
    assert main(["data", "prepare", str(source), "-o", str(output), "--tokenizer", str(bpe_file),
                 "--val-fraction", "0.25", "--test-fraction", "0.25", "--workers", "1"]) == 0
    tokenizer, data = HFTokenizerFile(bpe_file), PreparedData(output)
    stored = [data.split(split).sample(i)[1] for split in SPLITS for i in range(len(data.split(split)))]
    assert sorted(tokenizer.decode(ids) for ids in stored) == sorted(LINES * 4)
    assert not any(tokenizer.special_token_ids & set(ids) for ids in stored)


def test_a_tokenizer_that_cannot_read_a_special_token_as_text_is_refused_naming_the_line(tmp_path, capsys):
    corpus = tmp_path / "symbols.txt"
    corpus.write_text("3 1 4\n5 <mask> 6\n")
    with pytest.raises(ValueError, match=rf"{corpus}:2: '<mask>' is read as the tokenizer's special token \(id 1\), "
                                         "not as text"):
        TextFileTask(corpus, builtin_tokenizer())
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"prompt": "3 1", "response": "1 3"}\n{"prompt": "4 2", "response": "2 4 <eos>"}\n')
    assert main(["data", "prepare", str(pairs), "-o", str(tmp_path / "out"), "--tokenizer", "builtin",
                 "--format", "prompt_response", "--workers", "1"]) == 2
    assert f"{pairs}:2: '<eos>' is read as the tokenizer's special token (id 3)" in capsys.readouterr().err
    with pytest.raises(SpecialTokenInText) as caught:
        encode_as_text(builtin_tokenizer(), ["1 2", "3 <pad>"])
    assert caught.value.index == 1


def test_a_text_the_tokenizer_cannot_encode_is_named_by_its_line(tmp_path, capsys):
    """``task=text_file`` with the built-in tokenizer said ``unknown symbol '#' at position 0``,
    naming neither the file nor the line."""
    corpus = tmp_path / "notes.txt"
    corpus.write_text("3 1 4\n\n5 9 2\n# a heading\n")
    with pytest.raises(ValueError, match=rf"^{corpus}:4: SymbolTokenizer.encode: unknown symbol '#' at position 0"):
        TextFileTask(corpus, builtin_tokenizer())
    with pytest.raises(UnencodableText) as caught:
        encode_as_text(builtin_tokenizer(), ["1 2", "3 4", "5 ?"])
    assert caught.value.index == 2 and not isinstance(caught.value, SpecialTokenInText)
    assert main(["data", "prepare", str(corpus), "-o", str(tmp_path / "out"), "--tokenizer", "builtin",
                 "--workers", "1"]) == 2
    assert f"{corpus}:4: SymbolTokenizer.encode: unknown symbol '#'" in capsys.readouterr().err
