"""Train a local Hugging Face ``tokenizers`` file on a text corpus, ready for ``tokenizer=PATH``.

Two kinds:

- ``bpe`` (default): byte-level BPE. Every byte is in the initial alphabet, so any text
  encodes without an unknown token and decodes back to itself.
- ``wordlevel``: one token per word or punctuation mark seen at least ``min_frequency`` times;
  anything else becomes ``<unk>``. Decoding joins tokens with spaces.

Either way the special tokens xdllm needs (:data:`xdllm.data.tokenizer.SPECIAL_TOKENS`: ``<pad>
<mask> <bos> <eos>``) come first, at ids 0-3, then ``<unk>``. Training reads only the given
files; nothing is downloaded. The file is written atomically.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from xdllm.data.repeated_inputs import refuse_repeated_files
from xdllm.data.tokenizer import SPECIAL_TOKENS, HFTokenizerFile
from xdllm.data.utf8_text import NotUTF8Text, decode_utf8
from xdllm.errors import XdllmError
from xdllm.temporary_files import written_atomically

UNK_TOKEN = "<unk>"
TOKENIZER_KINDS = ("bpe", "wordlevel")


@dataclass(frozen=True)
class TrainedTokenizer:
    path: Path
    kind: str
    vocab_size: int
    corpus_lines: int


def _check_corpus(paths: Sequence[Path]) -> int:
    """Every file exists and is UTF-8 text; the number of non-empty lines over all of them."""
    lines = 0
    for path in paths:
        if path.is_dir():
            raise XdllmError(f"tokenizer train: {path} is a folder: give the text files in it")
        if not path.is_file():
            raise XdllmError(f"tokenizer train: corpus file not found: {path}")
        try:
            with open(path, encoding="utf-8") as handle:
                lines += sum(1 for line in handle if line.strip())
        except UnicodeDecodeError:  # read again whole, to name the line and the byte
            try:
                decode_utf8(path.read_bytes(), path)
            except NotUTF8Text as error:
                raise XdllmError(f"tokenizer train: {error}") from None
            raise
    if lines == 0:
        raise XdllmError(f"tokenizer train: the corpus ({', '.join(map(str, paths))}) holds no text")
    refuse_repeated_files(paths, "tokenizer train", "its words would count twice (a merge or word seen once "
                          "would pass --min-frequency 2)")
    return lines


def _untrained(kind: str, vocab_size: int, min_frequency: int) -> tuple[Tokenizer, trainers.Trainer]:
    special = [*SPECIAL_TOKENS, UNK_TOKEN]
    if kind == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=special, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        return tokenizer, trainer
    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK_TOKEN))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                       pre_tokenizers.Punctuation()])
    trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=special, show_progress=False)
    return tokenizer, trainer


def _train_off_the_main_thread(tokenizer: Tokenizer, files: list[str], trainer: trainers.Trainer) -> None:
    """``tokenizer.train`` in a daemon thread while the main thread waits for it. The Rust trainer
    takes no Python signals until it returns, so in the main thread a Ctrl-C or SIGTERM waited
    for the whole training (11 s on a 94 MB corpus); the waiting main thread takes them at once,
    and the abandoned thread ends with the process."""
    failed: list[BaseException] = []

    def train() -> None:
        try:
            tokenizer.train(files, trainer)
        except BaseException as error:  # raised again in the main thread
            failed.append(error)

    thread = threading.Thread(target=train, name="xdllm-tokenizer-train", daemon=True)
    thread.start()
    while thread.is_alive():  # woken often: a signal delivered to one of the trainer's threads
        thread.join(timeout=0.1)  # interrupts no wait of the main thread, which must look for it
    if failed:
        raise failed[0]


def train_tokenizer_file(corpus: Sequence[str | Path], output: str | Path, kind: str = "bpe",
                         vocab_size: int = 8000, min_frequency: int = 2,
                         overwrite: bool = False) -> TrainedTokenizer:
    """Train a ``kind`` tokenizer of at most ``vocab_size`` tokens on the ``corpus`` files and
    write it to ``output`` (a ``.json`` path). An existing ``output`` is refused unless
    ``overwrite``: runs trained with it would read their ids differently."""
    if kind not in TOKENIZER_KINDS:
        raise XdllmError(f"tokenizer train: kind must be one of {', '.join(TOKENIZER_KINDS)}, got {kind!r}")
    minimum = len(SPECIAL_TOKENS) + 1 + (len(pre_tokenizers.ByteLevel.alphabet()) if kind == "bpe" else 1)
    if vocab_size < minimum:
        raise XdllmError(f"tokenizer train: vocab_size {vocab_size} is too small for a {kind} tokenizer "
                         f"(at least {minimum})")
    if min_frequency < 1:
        raise XdllmError(f"tokenizer train: min_frequency must be >= 1, got {min_frequency}")
    output = Path(output)
    if output.suffix != ".json":
        raise XdllmError(f"tokenizer train: the output must be a .json file (tokenizer=PATH loads "
                         f"those), got {output}")
    if output.exists() and not overwrite:
        raise XdllmError(f"tokenizer train: {output} exists; runs trained with it would read their ids "
                         "differently: choose another path or pass --overwrite")
    paths = [Path(path) for path in corpus]
    lines = _check_corpus(paths)
    tokenizer, trainer = _untrained(kind, vocab_size, min_frequency)
    _train_off_the_main_thread(tokenizer, [str(path) for path in paths], trainer)
    with written_atomically(output) as temporary:
        tokenizer.save(str(temporary))
    loaded = HFTokenizerFile(output)  # what `tokenizer=PATH` will load
    return TrainedTokenizer(output, kind, loaded.vocab_size, lines)
