"""`xdllm tokenizer train` builds a local tokenizer file that `tokenizer=PATH` loads."""

import signal
import subprocess
import sys
import time

import pytest

from xdllm.cli.main import main
from xdllm.data.tokenizer import SPECIAL_TOKENS, HFTokenizerFile
from xdllm.data.tokenizer_training import train_tokenizer_file

ANIMALS = ["dog", "cat", "bird", "fox"]
PLACES = ["park", "river", "forest"]


def corpus_lines() -> list[str]:
    """A small deterministic corpus: every animal at every place, twice over."""
    return [f"the {animal} ran to the {place}, then it slept." for animal in ANIMALS
            for place in PLACES for _ in range(2)]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(corpus_lines()) + "\n\n", encoding="utf-8")
    return path


def test_bpe_tokenizer_has_xdllm_special_tokens_and_round_trips_any_text(corpus, tmp_path, capsys):
    output = tmp_path / "tokenizer.json"
    assert main(["tokenizer", "train", str(corpus), "-o", str(output), "--vocab-size", "300"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {output}: bpe, 300 tokens, trained on 24 lines; ")
    tokenizer = HFTokenizerFile(output)
    assert [tokenizer.pad_token_id, tokenizer.mask_token_id, tokenizer.bos_token_id,
            tokenizer.eos_token_id] == [0, 1, 2, 3]
    assert tokenizer.id_to_token(4) == "<unk>" and tokenizer.vocab_size <= 300
    text = "the fox ran to the river, Ünïcode ✓ never seen"
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text  # byte level: nothing becomes <unk>
    assert 4 not in ids
    assert len(tokenizer.encode("the dog ran to the park")) < len("the dog ran to the park")  # merges learnt


@pytest.mark.parametrize(("kind", "seen"), [("bpe", "pairs of tokens"), ("wordlevel", "words")])
def test_a_tokenizer_smaller_than_asked_for_says_why(corpus, tmp_path, capsys, kind, seen):
    """It said '449 tokens' after --vocab-size 500 (a 3000-line corpus), as if it had dropped what was asked."""
    output = tmp_path / "tokenizer.json"
    assert main(["tokenizer", "train", str(corpus), "-o", str(output), "--kind", kind, "--vocab-size", "1000"]) == 0
    assert capsys.readouterr().out.startswith(
        f"wrote {output}: {kind}, {HFTokenizerFile(output).vocab_size} tokens (fewer than --vocab-size 1000: the "
        f"corpus holds no more {seen} seen at least --min-frequency 2 times), trained on 24 lines; ")


def test_wordlevel_tokenizer_maps_unseen_words_to_unk(corpus, tmp_path):
    trained = train_tokenizer_file([corpus], tmp_path / "words.json", kind="wordlevel", min_frequency=1)
    tokenizer = HFTokenizerFile(trained.path)
    assert trained.corpus_lines == len(corpus_lines())
    assert tokenizer.decode(tokenizer.encode("the cat slept.")) == "the cat slept ."
    assert tokenizer.encode("the zebra") == [tokenizer.encode("the")[0], tokenizer.unk_token_id]
    assert tokenizer.vocab_size == len(SPECIAL_TOKENS) + 1 + len(
        {"the", "ran", "to", ",", "then", "it", "slept", ".", *ANIMALS, *PLACES})


def test_an_existing_tokenizer_is_not_overwritten_silently(corpus, tmp_path, capsys):
    output = tmp_path / "tokenizer.json"
    output.write_text("{}")
    assert main(["tokenizer", "train", str(corpus), "-o", str(output)]) == 2
    assert "exists" in capsys.readouterr().err and output.read_text() == "{}"
    assert main(["tokenizer", "train", str(corpus), "-o", str(output), "--overwrite"]) == 0
    assert HFTokenizerFile(output).vocab_size > len(SPECIAL_TOKENS)


@pytest.mark.parametrize("setup, arguments, message", [
    (None, ["missing.txt", "-o", "t.json"], "corpus file not found"),
    ("folder", ["texts", "-o", "t.json"], "texts is a folder: give the text files in it"),
    ("bytes", ["bad.txt", "-o", "t.json"], "bad.txt:2: not UTF-8 text (byte 0xe9 at byte offset 7 of the file)"),
    ("empty", ["empty.txt", "-o", "t.json"], "holds no text"),
    ("text", ["ok.txt", "-o", "t.txt"], "must be a .json file"),
    ("text", ["ok.txt", "-o", "t.json", "--vocab-size", "100"], "is too small for a bpe tokenizer"),
    ("text", ["ok.txt", "./ok.txt", "-o", "t.json"], "tokenizer train: input ok.txt is ok.txt given again: its "
                                                    "words would count twice"),
])
def test_bad_input_is_one_line(tmp_path, monkeypatch, capsys, setup, arguments, message):
    monkeypatch.chdir(tmp_path)
    if setup == "bytes":
        (tmp_path / "bad.txt").write_bytes(b"tea\ncaf\xe9\n")
    elif setup == "folder":
        (tmp_path / "texts").mkdir()
    elif setup == "empty":
        (tmp_path / "empty.txt").write_text("\n  \n")
    elif setup == "text":
        (tmp_path / "ok.txt").write_text("some text\n")
    assert main(["tokenizer", "train", *arguments]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xdllm: error: ") and message in err[0]
    assert not (tmp_path / "t.json").exists()


def test_views_show_a_bpe_token_as_the_text_it_stands_for(corpus, tmp_path):
    tokenizer = HFTokenizerFile(train_tokenizer_file([corpus], tmp_path / "bpe.json", vocab_size=300).path)
    (fox,) = tokenizer.encode(" fox")
    assert tokenizer.id_to_token(fox) == "Ġfox" and tokenizer.display_token(fox) == " fox"
    assert tokenizer.display_token(tokenizer.mask_token_id) == "<mask>"
    first_byte = tokenizer.encode("✓")[0]  # a piece of a three-byte character decodes to nothing readable
    assert tokenizer.display_token(first_byte) == tokenizer.id_to_token(first_byte)
    words = HFTokenizerFile(train_tokenizer_file([corpus], tmp_path / "words.json", kind="wordlevel",
                                                 min_frequency=1).path)
    (fox,) = words.encode("fox")
    assert words.display_token(fox) == "fox"


SLOW_TRAINER = """
import signal, sys, time
from pathlib import Path
import xdllm.data.tokenizer_training as training
from xdllm.cli.main import main

class SlowTokenizer:
    # like the Rust trainer: takes no Python signal while it trains (its thread blocks them)
    def train(self, files, trainer):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        Path(sys.argv[2]).write_text("training")
        time.sleep(120)

training._untrained = lambda kind, vocab_size, min_frequency: (SlowTokenizer(), None)
# Ctrl-C as in a terminal's foreground: a suite started as a shell's background job (`pytest &`)
# hands its processes SIGINT ignored, which a child keeps
signal.signal(signal.SIGINT, signal.default_int_handler)
status = main(["tokenizer", "train", sys.argv[1], "-o", sys.argv[3]])
print("status", status, "training module loaded", "xdllm.run.train" in sys.modules)
"""


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_tokenizer_training_at_once(corpus, tmp_path, stop):
    started, output = tmp_path / "started", tmp_path / "tokenizer.json"
    process = subprocess.Popen([sys.executable, "-c", SLOW_TRAINER, str(corpus), str(started), str(output)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), process.communicate(timeout=5)
    sent = time.monotonic()
    process.send_signal(stop)
    try:
        out, err = process.communicate(timeout=60)  # before: the trainer's whole run (120 s here)
    finally:
        process.kill()
    assert time.monotonic() - sent < 30
    said = "xdllm: interrupted" if stop == signal.SIGINT else "xdllm: stopped by SIGTERM"
    assert err.strip().endswith(said), err
    status = 130 if stop == signal.SIGINT else 143
    # the exit path does not load the training module (and Lightning) to word a hint for training
    assert out.strip() == f"status {status} training module loaded False"
    assert not output.exists()
