"""``xdllm tokenizer show``: a tokenizer's size, special tokens and fingerprint, the tokens a text
encodes to, and how many tokens the lines of a corpus make."""

from pathlib import Path

import pytest

from xdllm.cli.main import main
from xdllm.data.tokenizer import HFTokenizerFile, builtin_tokenizer

STORIES = Path(__file__).resolve().parents[2] / "experiments" / "data"


def _shown(capsys, *arguments: str) -> list[str]:
    assert main(["tokenizer", "show", *arguments]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_builtin_tokenizer_and_a_text_it_encodes(capsys):
    fingerprint = builtin_tokenizer().fingerprint[:12]
    assert _shown(capsys, "builtin", "1 2 + 3") == [
        f"builtin: 46 tokens; <pad> 0, <mask> 1, <bos> 2, <eos> 3; an unknown symbol is refused; fingerprint "
        f"{fingerprint}",
        "'1 2 + 3': 4 tokens",
        "  '1' 5  '2' 6  '+' 40  '3' 7"]


def test_a_tokenizer_file_marks_unknown_text_and_counts_a_corpus(tmp_path, capsys):
    path = STORIES / "stories_tokenizer.json"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("sam went to the park .\n\nmia went to the zoo with her dog .\n")
    lines = _shown(capsys, str(path), "sam went to the zoo", "--file", str(corpus))
    tokenizer = HFTokenizerFile(path)
    assert lines[0] == (f"{path}: 81 tokens; <pad> 0, <mask> 1, <bos> 2, <eos> 3; text outside its vocabulary "
                        f"becomes <unk> 4; fingerprint {tokenizer.fingerprint[:12]}")
    assert lines[1] == "'sam went to the zoo': 5 tokens"
    assert lines[2].endswith("'the' 6  '<unk>' 4 (unknown)")
    counts = [len(tokenizer.encode(line)) for line in ("sam went to the park .", "mia went to the zoo with her dog .")]
    assert lines[3] == (f"{corpus}: 2 lines, {sum(counts)} tokens: {sum(counts) / 2:.1f} per line (the longest "
                        f"{max(counts)}), {sum(counts) / 15:.2f} per word; 1 unknown")
    assert lines[4] == f"  with <bos> and <eos>, lines of {max(counts) + 2} tokens at most"


@pytest.mark.parametrize("arguments, error", [
    (["builtin", "hello"], "SymbolTokenizer.encode: unknown symbol 'hello' at position 0"),
    (["missing.json"], "HFTokenizerFile: tokenizer file missing.json does not exist"),
    (["builtin", "--file", "missing.txt"], "--file missing.txt: No such file or directory"),
    (["tokenizer.txt"], "load_tokenizer: expected 'builtin' or a path to a tokenizers .json file"),
    (["builtin", "--file", "pairs.jsonl"], "--file pairs.jsonl is a JSON file, whose lines would be counted as text"),
])
def test_wrong_input_is_one_line(capsys, arguments, error):
    assert main(["tokenizer", "show", *arguments]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"xdllm: error: {error}")
    assert len(captured.err.splitlines()) == 1
