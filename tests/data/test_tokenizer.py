from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from xdllm.data.tokenizer import HFTokenizerFile, SymbolTokenizer, builtin_tokenizer, load_tokenizer
from xdllm.interfaces import Tokenizer as TokenizerProtocol


def test_symbol_tokenizer_ids_round_trip_and_specials():
    tokenizer = SymbolTokenizer(["a", "b", "+"])
    assert (tokenizer.pad_token_id, tokenizer.mask_token_id, tokenizer.bos_token_id,
            tokenizer.eos_token_id) == (0, 1, 2, 3)
    assert tokenizer.vocab_size == 7
    assert tokenizer.special_token_ids == frozenset({0, 1, 2, 3})
    assert tokenizer.encode("a + b") == [4, 6, 5]
    assert tokenizer.encode("  a\tb \n") == [4, 5]
    assert tokenizer.decode([2, 4, 6, 5, 3, 0]) == "a + b"
    assert tokenizer.decode([2, 4, 1, 3], skip_special_tokens=False) == "<bos> a <mask> <eos>"
    assert tokenizer.id_to_token(6) == "+"
    assert isinstance(tokenizer, TokenizerProtocol)


def test_an_unknown_symbol_says_what_the_tokenizer_knows_and_how_to_get_one_for_other_text():
    with pytest.raises(ValueError) as refused:
        builtin_tokenizer().encode_batch(["1 2", "hello world"])
    assert str(refused.value) == (
        "SymbolTokenizer.encode: unknown symbol 'hello' at position 0; it knows 42 symbols, each a "
        "whitespace-separated word (0 1 2 3 4 5 6 7 8 9 a b c d e f g h i j k l m n o p q r s t u v w x y z + = > , "
        "| :); for other text train a tokenizer file (xdllm tokenizer train CORPUS -o tokenizer.json) and give it "
        "instead")
    with pytest.raises(ValueError, match=r"it knows 60 symbols, each a whitespace-separated word "
                                         r"\(s0 s1 .* s47 \.\.\.\)"):
        SymbolTokenizer([f"s{i}" for i in range(60)]).encode("s1 x")


def test_symbol_tokenizer_errors_name_the_problem():
    tokenizer = SymbolTokenizer(["a", "b"])
    with pytest.raises(ValueError, match=r"unknown symbol 'c' at position 2"):
        tokenizer.encode("a b c")
    with pytest.raises(ValueError, match="outside"):
        tokenizer.id_to_token(6)
    with pytest.raises(ValueError, match="duplicate"):
        SymbolTokenizer(["a", "a"])
    with pytest.raises(ValueError, match="whitespace"):
        SymbolTokenizer(["a b"])


def test_builtin_tokenizer_covers_the_task_symbols():
    tokenizer = builtin_tokenizer()
    text = "0 9 a z + = > , | :"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.encode("0")[0] == 4
    assert tokenizer.vocab_size == 4 + 10 + 26 + 6
    assert load_tokenizer("builtin").encode("7 q") == tokenizer.encode("7 q")


def _write_word_level(path: Path, vocab_tokens: list[str]) -> Path:
    vocab = {token: index for index, token in enumerate(vocab_tokens)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(path))
    return path


def test_hf_tokenizer_file_loads_a_local_word_level_json(tmp_path):
    path = _write_word_level(tmp_path / "tok.json",
                             ["<unk>", "<eos>", "<bos>", "<mask>", "<pad>", "hello", "world"])
    tokenizer = load_tokenizer(path)
    assert isinstance(tokenizer, HFTokenizerFile)
    assert isinstance(tokenizer, TokenizerProtocol)
    assert (tokenizer.pad_token_id, tokenizer.mask_token_id, tokenizer.bos_token_id,
            tokenizer.eos_token_id) == (4, 3, 2, 1)
    assert tokenizer.special_token_ids == frozenset({1, 2, 3, 4})
    assert tokenizer.vocab_size == 7
    assert tokenizer.encode("hello world hello") == [5, 6, 5]
    assert tokenizer.decode([2, 5, 3, 6, 1, 4]) == "hello world"
    assert tokenizer.decode([2, 5], skip_special_tokens=False) == "<bos> hello"
    assert tokenizer.id_to_token(6) == "world"
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tokenizer.id_to_token(99)


def test_hf_tokenizer_file_errors_name_file_and_token(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json"):
        HFTokenizerFile(tmp_path / "missing.json")
    path = _write_word_level(tmp_path / "nomask.json", ["<unk>", "<pad>", "<bos>", "<eos>", "x"])
    with pytest.raises(ValueError, match=r"nomask\.json lacks special tokens xdllm needs, not in its "
                                         r"vocabulary: mask_token '<mask>'; "):
        HFTokenizerFile(path)
    assert HFTokenizerFile(path, mask_token="<unk>").mask_token_id == 0
    with pytest.raises(ValueError, match="'builtin' or a path"):
        load_tokenizer("gpt2")
