"""`xdllm data prepare` writes exactly the arrays of the plain algorithm: every record encoded on
its own, documents cut into ``max_tokens`` pieces, held-out samples drawn from the seed."""

import hashlib
import json
from itertools import groupby
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from xdllm.data import prepare_worker
from xdllm.data.prepare import PrepareOptions, choose_held_out, held_out_counts, prepare
from xdllm.data.prepared_store import SPLITS, token_dtype
from xdllm.data.source_records import RecordFormat
from xdllm.data.tokenizer import SPECIAL_TOKENS, load_tokenizer
from xdllm.errors import XdllmError

STORIES = Path(__file__).parents[2] / "experiments" / "data" / "stories.txt"
STORIES_TOKENIZER = STORIES.with_name("stories_tokenizer.json")


def _bpe_tokenizer(path: Path, texts: list[str]) -> Path:
    """A byte-level BPE of 300 tokens trained on ``texts``."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=300, special_tokens=list(SPECIAL_TOKENS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tokenizer.save(str(path))
    return path


def _hash_dropping_tokenizer(path: Path) -> Path:
    """Word-level over the stories' words; ``#`` is removed before splitting, so a line of only
    ``#`` encodes to no tokens."""
    words = sorted(set(STORIES.read_text().split()))
    tokenizer = Tokenizer(models.WordLevel({word: i for i, word in enumerate([*SPECIAL_TOKENS, "<unk>", *words])},
                                           unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Replace("#", "")
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(path))
    return path


def _text_lines() -> list[str]:
    """Story lines with blank, whitespace-only, CRLF-ended, hash-only, unknown-word and long lines."""
    stories = STORIES.read_text().splitlines()[:120]
    lines = []
    for i, line in enumerate(stories):
        lines.append(line)
        if i % 17 == 0:
            lines += ["", "   \t"]
        if i % 23 == 0:
            lines += ["# ##", "zebra ünïcødé " + line]
        if i % 29 == 0:
            lines.append(" ".join(stories[i:i + 6]))  # longer than max_tokens
    return lines


def _reference(lines: list[str], tokenizer_name: str, record_format: RecordFormat, max_tokens: int | None,
               fractions: tuple[float, float], seed: int) -> dict[str, np.ndarray]:
    """The arrays, the plain way: one ``encode`` per record, pieces cut in Python."""
    tokenizer = load_tokenizer(tokenizer_name)
    samples: list[tuple[list[int], list[int]]] = []
    for number, line in enumerate(lines, start=1):
        record = record_format.record(line.removesuffix("\r"), f"line {number}")
        if record is None:
            continue
        prompt = tokenizer.encode(record[0]) if record[0] else []
        target = tokenizer.encode(record[1])
        if record_format.kind == "prompt_response":
            samples.append((prompt, target))
        else:
            step = max_tokens or len(target)
            samples += [([], target[start:start + step]) for start in range(0, len(target), step)]
    validation, test = choose_held_out(len(samples), *held_out_counts(len(samples), *fractions), seed)
    labels = np.zeros(len(samples), dtype=np.int8)
    labels[validation], labels[test] = 1, 2
    dtype = token_dtype(tokenizer.vocab_size)
    arrays = {}
    for label, split in enumerate(SPLITS):
        chosen = [sample for sample, sample_label in zip(samples, labels) if sample_label == label]
        arrays[f"{split}.tokens"] = np.array([i for prompt, target in chosen for i in prompt + target], dtype=dtype)
        arrays[f"{split}.offsets"] = np.cumsum([0] + [len(p) + len(t) for p, t in chosen]).astype(np.int64)
        if record_format.kind == "prompt_response":
            arrays[f"{split}.prompt_lengths"] = np.array([len(p) for p, _ in chosen], dtype=np.int64)
    return arrays


def _prepared(folder: Path) -> dict[str, np.ndarray]:
    return {path.name.removesuffix(".npy"): np.load(path) for path in sorted(folder.glob("*.npy"))}


def _assert_same(prepared: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert sorted(prepared) == sorted(expected)
    for name, array in expected.items():
        assert prepared[name].dtype == array.dtype, name
        np.testing.assert_array_equal(prepared[name], array, err_msg=name)


@pytest.mark.parametrize("tokenizer_kind, workers, chunk_bytes, batch_lines", [
    ("stories", 1, 1 << 20, 1024), ("stories", 2, 701, 3), ("bpe", 2, 1500, 7), ("hash_dropping", 1, 997, 5),
])
def test_text_documents_equal_the_plain_algorithm(tmp_path, monkeypatch, tokenizer_kind, workers, chunk_bytes,
                                                  batch_lines):
    lines = _text_lines()
    source = tmp_path / "corpus.txt"
    source.write_bytes("".join(line + ("\r\n" if i % 5 == 0 else "\n") for i, line in enumerate(lines)).encode())
    tokenizer = {"stories": lambda: STORIES_TOKENIZER,
                 "bpe": lambda: _bpe_tokenizer(tmp_path / "bpe.json", lines),
                 "hash_dropping": lambda: _hash_dropping_tokenizer(tmp_path / "hash.json")}[tokenizer_kind]()
    monkeypatch.setattr(prepare_worker, "BATCH_LINES", batch_lines)  # inherited by forked workers
    output = tmp_path / "prepared"
    summary = prepare(PrepareOptions(inputs=[source], output=output, tokenizer=str(tokenizer), workers=workers,
                                     val_fraction=0.1, test_fraction=0.05, seed=3, max_tokens=12,
                                     chunk_bytes=chunk_bytes))
    assert summary["cut_documents"] > 0
    assert summary["skipped_empty_lines"] >= 16 + 6 * (tokenizer_kind == "hash_dropping")
    _assert_same(_prepared(output), _reference(lines, str(tokenizer), RecordFormat(), 12, (0.1, 0.05), 3))


def test_prompt_response_pairs_equal_the_plain_algorithm(tmp_path, monkeypatch):
    stories = STORIES.read_text().splitlines()[:80]
    lines = [json.dumps({"prompt": "" if i % 7 == 0 else stories[i], "response": stories[i + 1]}) for i in range(79)]
    lines[10:10] = ["", "  "]
    source = tmp_path / "pairs.jsonl"
    source.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(prepare_worker, "BATCH_LINES", 4)
    output = tmp_path / "prepared"
    record_format = RecordFormat("prompt_response")
    prepare(PrepareOptions(inputs=[source], output=output, tokenizer=str(STORIES_TOKENIZER),
                           record_format=record_format, workers=2, val_fraction=0.1, test_fraction=0.1,
                           chunk_bytes=900))
    _assert_same(_prepared(output), _reference(lines, str(STORIES_TOKENIZER), record_format, None, (0.1, 0.1), 0))


@pytest.mark.parametrize("tokenizer, source_lines, digest", [
    ("stories", 400, "eeabd14f7eb5c027a79b7aab92f4bff308d2e2d2dc6d7365a1b6d81bfb9ef3f7"),
    ("builtin", 300, "acabf6f703d45b622deb5a310e6e722ed35a1467555eda0d0c43916653ecdcc2"),
])
def test_prepared_arrays_keep_their_digest(tmp_path, tokenizer, source_lines, digest):
    """The bytes written for a fixed corpus, as of the line-by-line implementation."""
    if tokenizer == "stories":
        tokenizer, lines = str(STORIES_TOKENIZER), STORIES.read_text().splitlines()[:source_lines]
    else:
        lines = [" ".join(f"{i * 7919 % 10007:05d}" + "abcdefghij"[: i % 11]) for i in range(source_lines)]
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(lines) + "\n")
    output = tmp_path / "prepared"
    prepare(PrepareOptions(inputs=[source], output=output, tokenizer=tokenizer, workers=2, val_fraction=0.05,
                           test_fraction=0.05, max_tokens=16, chunk_bytes=2000))
    hashed = hashlib.sha256()
    for split in SPLITS:
        for array in ("tokens", "offsets"):
            hashed.update((output / f"{split}.{array}.npy").read_bytes())
    assert hashed.hexdigest() == digest


def test_encode_batch_gives_the_ids_of_encode(tmp_path):
    texts = ["the dog runs .", "", "zebra the cat", "mia went to the park"]
    for tokenizer in (load_tokenizer(STORIES_TOKENIZER), load_tokenizer(_bpe_tokenizer(tmp_path / "b.json", texts))):
        assert tokenizer.encode_batch(texts) == [tokenizer.encode(text) for text in texts]
    builtin = load_tokenizer("builtin")
    assert builtin.encode_batch(["1 + 2", " ", "a b"]) == [builtin.encode(t) for t in ["1 + 2", " ", "a b"]]
    with pytest.raises(ValueError, match="unknown symbol 'Q' at position 1"):
        builtin.encode_batch(["1 2", "a Q"])


def test_an_error_names_the_first_failing_line_of_a_batch(tmp_path, monkeypatch):
    """A batch fails as a whole; the error still names the first line, prompt before response."""
    monkeypatch.setattr(prepare_worker, "BATCH_LINES", 64)
    good, bad_prompt, bad_response = ("1 +", "2"), ("1 X", "2"), ("1", "Y")
    for pairs, line, symbol in (([bad_response, good, bad_prompt], 1, "Y"), ([good, bad_prompt, bad_response], 2, "X")):
        source = tmp_path / "pairs.jsonl"
        source.write_text("".join(json.dumps({"prompt": p, "response": r}) + "\n" for p, r in pairs))
        with pytest.raises(XdllmError, match=rf"{source}:{line}: SymbolTokenizer.encode: unknown symbol '{symbol}'"):
            prepare(PrepareOptions(inputs=[source], output=tmp_path / "out", tokenizer="builtin",
                                   record_format=RecordFormat("prompt_response")))


def _documents_plainly(texts: list[str], documents: str) -> list[str]:
    """Each file's documents the plain way: runs of non-blank lines (paragraphs), or the file
    from its first to its last non-blank line."""
    found = []
    for text in texts:
        lines = text.replace("\r\n", "\n").split("\n")
        if documents == "paragraph":
            found += ["\n".join(run) for filled, run in groupby(lines, key=lambda line: bool(line.strip())) if filled]
        else:
            while lines and not lines[-1].strip():
                lines.pop()
            while lines and not lines[0].strip():
                lines.pop(0)
            found += ["\n".join(lines)] if lines else []
    return found


@pytest.mark.parametrize("documents, chunk_bytes, batch_lines", [
    ("paragraph", 1 << 20, 1024), ("paragraph", 97, 3), ("file", 97, 3), ("file", 1 << 20, 2),
])
def test_paragraph_and_file_documents_equal_the_plain_algorithm(tmp_path, monkeypatch, documents, chunk_bytes,
                                                                batch_lines):
    stories = STORIES.read_text().splitlines()[:60]
    texts = []
    for part in range(3):  # paragraphs of 1-4 lines between blank, whitespace-only or several blank lines
        lines = []
        for i, line in enumerate(stories[part * 20:(part + 1) * 20]):
            lines.append(line)
            if i % 3 == 2:
                lines += [["", "  \t", "\n"][i % 9 // 3]]
        texts.append("".join(line + ("\r\n" if i % 4 == 0 else "\n") for i, line in enumerate(["", *lines])))
    texts.append("\n \n")  # a file of blank lines: no document
    sources = []
    for index, text in enumerate(texts):
        sources.append(tmp_path / f"book{index}.txt")
        sources[-1].write_bytes(text.encode())
    tokenizer = _bpe_tokenizer(tmp_path / "bpe.json", stories)
    monkeypatch.setattr(prepare_worker, "BATCH_LINES", batch_lines)
    output = tmp_path / "prepared"
    summary = prepare(PrepareOptions(inputs=sources, output=output, tokenizer=str(tokenizer), workers=2,
                                     record_format=RecordFormat(documents=documents), val_fraction=0.0,
                                     test_fraction=0.0, chunk_bytes=chunk_bytes))
    expected = _documents_plainly(texts, documents)
    assert len(expected) == (3 if documents == "file" else 3 * 7)
    encoder = load_tokenizer(str(tokenizer))
    ids = [encoder.encode(document) for document in expected]
    prepared = _prepared(output)
    np.testing.assert_array_equal(prepared["train.tokens"], np.concatenate(ids))
    np.testing.assert_array_equal(prepared["train.offsets"], np.cumsum([0] + [len(i) for i in ids]))
    assert summary["samples"]["train"] == len(expected)
    assert any("\n" in document for document in expected)  # lines inside a document are kept as lines


@pytest.mark.parametrize("record_format",
                         [RecordFormat("text"), RecordFormat("jsonl"), RecordFormat("prompt_response")])
def test_records_of_a_batch_are_those_of_record(record_format):
    texts = ["a b", "", " \t", "\u3000", "\x1c", "x\u00a0", "\u2028"]
    lines = [line if record_format.format == "text" else
             json.dumps({"text": line, "prompt": line, "response": line}) if line.strip() else line for line in texts]
    numbered = list(enumerate(lines, start=7))
    expected = [(number, *record) for number, line in numbered
                if (record := record_format.record(line, f"f:{number}")) is not None]
    assert record_format.records(numbered, "f") == (expected, len(numbered) - len(expected))
    assert [number for number, *_ in expected] == [7, 12]
