"""`xdllm data prepare`: local text, JSONL and prompt/response files to memory-mapped splits."""

import json
import os
import shlex
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from xdllm.cli.main import main
from xdllm.data.prepare import PrepareOptions, held_out_counts, prepare
from xdllm.data.prepared_store import SPLITS, PreparedData
from xdllm.data.source_records import RecordFormat
from xdllm.data.tokenizer import builtin_tokenizer, load_tokenizer
from xdllm.errors import XdllmError

TOKENIZER = builtin_tokenizer()
STORIES_TOKENIZER = Path(__file__).parents[2] / "experiments" / "data" / "stories_tokenizer.json"


def _lines(count: int) -> list[str]:
    """Distinct documents in the built-in tokenizer's symbols, of 1-6 tokens."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [" ".join(letters[(i + j) % 26] for j in range(1 + i % 6)) + f" {i % 10}" for i in range(count)]


def _all_samples(folder: Path) -> dict[str, list[tuple[list[int], list[int]]]]:
    data = PreparedData(folder)
    return {split: [data.split(split).sample(i) for i in range(len(data.split(split)))] for split in SPLITS}


def test_text_lines_become_documents_split_once_with_exact_counts(tmp_path, capsys):
    lines = _lines(200)
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(lines[:50]) + "\n\n  \n" + "\n".join(lines[50:]) + "\n")
    output = tmp_path / "prepared"
    assert main(["data", "prepare", str(source), "-o", str(output), "--tokenizer", "builtin",
                 "--val-fraction", "0.1", "--test-fraction", "0.05", "--workers", "2"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["samples"] == {"train": 170, "validation": 20, "test": 10}
    # held-out splits smaller than train.yaml's 256 / 512: the suggested line asks for no more
    assert captured.err.strip().splitlines()[-1] == (
        f"train on it: xdllm train task=prepared task.params.path={output} tokenizer=builtin "
        "collator=packed_mlm data.num_val_samples=20 data.num_test_samples=10")
    assert summary["skipped_empty_lines"] == 2
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["kind"] == "text" and manifest["token_dtype"] == "uint16"
    assert manifest["tokenizer"]["fingerprint"] == TOKENIZER.fingerprint
    samples = _all_samples(output)
    assert all(prompt == [] for split in SPLITS for prompt, _ in samples[split])
    stored = [TOKENIZER.decode(target) for split in SPLITS for _, target in samples[split]]
    assert sorted(stored) == sorted(lines)  # every document once, in exactly one split
    train = [TOKENIZER.decode(target) for _, target in samples["train"]]
    assert train == [line for line in lines if line in set(train)]  # source order kept
    assert manifest["splits"]["train"]["tokens"] == sum(len(t) for _, t in samples["train"])
    assert not [path for path in tmp_path.iterdir() if ".tmp-" in path.name]


def test_splits_do_not_depend_on_workers_or_chunking(tmp_path):
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(_lines(300)) + "\n")
    results = []
    for workers, chunk_bytes in ((1, 1 << 20), (2, 97), (2, 31)):
        output = tmp_path / f"prepared-{workers}-{chunk_bytes}"
        prepare(PrepareOptions(inputs=[source], output=output, tokenizer="builtin", workers=workers,
                               val_fraction=0.1, test_fraction=0.1, chunk_bytes=chunk_bytes))
        results.append(_all_samples(output))
    assert results[0] == results[1] == results[2]
    other_seed = tmp_path / "seed1"
    prepare(PrepareOptions(inputs=[source], output=other_seed, tokenizer="builtin", val_fraction=0.1,
                           test_fraction=0.1, seed=1))
    assert _all_samples(other_seed)["validation"] != results[0]["validation"]


def test_jsonl_text_field_and_long_documents_cut_into_pieces(tmp_path):
    source = tmp_path / "docs.jsonl"
    records = [{"body": "a b c d e f g", "id": 1}, {"body": "x y"}, {"body": ""}]
    source.write_text("\n".join(json.dumps(record) for record in records) + "\n")
    output = tmp_path / "prepared"
    summary = prepare(PrepareOptions(inputs=[source], output=output, tokenizer="builtin",
                                     record_format=RecordFormat("jsonl", text_field="body"),
                                     val_fraction=0.0, test_fraction=0.0, max_tokens=3))
    assert summary["cut_documents"] == 1 and summary["skipped_empty_lines"] == 1
    train = [TOKENIZER.decode(target) for _, target in _all_samples(output)["train"]]
    assert train == ["a b c", "d e f", "g", "x y"]


def test_prompt_response_pairs_keep_prompt_and_response_apart(tmp_path):
    source = tmp_path / "pairs.jsonl"
    pairs = [{"q": f"{i} + {i} =", "a": " ".join(str(2 * i))} for i in range(10)]
    source.write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    output = tmp_path / "pairs"
    prepare(PrepareOptions(inputs=[source], output=output, tokenizer="builtin",
                           record_format=RecordFormat("prompt_response", prompt_field="q", response_field="a"),
                           val_fraction=0.2, test_fraction=0.2))
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["kind"] == "prompt_response"
    decoded = {(TOKENIZER.decode(prompt), TOKENIZER.decode(target))
               for split in SPLITS for prompt, target in _all_samples(output)[split]}
    assert decoded == {(pair["q"], pair["a"]) for pair in pairs}
    assert max(info["longest_target"] for info in manifest["splits"].values()) == 2


def test_a_local_tokenizers_file_is_fingerprinted_and_unknown_tokens_counted(tmp_path):
    source = tmp_path / "stories.txt"
    source.write_text("the cat sleeps .\nzzqx the dog\n")
    output = tmp_path / "prepared"
    summary = prepare(PrepareOptions(inputs=[source], output=output, tokenizer=str(STORIES_TOKENIZER),
                                     val_fraction=0.0, test_fraction=0.0))
    assert summary["unknown_tokens"] == 1
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["tokenizer"]["fingerprint"] == load_tokenizer(STORIES_TOKENIZER).fingerprint
    assert manifest["tokenizer"]["fingerprint"] != TOKENIZER.fingerprint


@pytest.mark.parametrize("content, fmt, message", [
    (b'{"text": "a b"}\n{"text": "c"\n', "jsonl", "docs:2: not valid JSON"),
    (b'{"text": "a b"}\n\n["c"]\n', "jsonl", "docs:3: expected a JSON object, got an array"),
    (b'{"text": "a"}\n{"body": "c"}\n', "jsonl", "docs:2: no field 'text' (fields: 'body')"),
    (b'{"text": "a"}\n{"text": 7}\n', "jsonl", "docs:2: field 'text' is a number, expected a string"),
    (b'{"prompt": "a", "response": "b"}\n{"prompt": "a"}\n', "prompt_response", "docs:2: no field 'response'"),
    (b"a b\nc \xff d\n", "text", "docs:2: not UTF-8 text (byte 0xff at byte offset 6"),
    (b"a b\nc D\n", "text", "docs:2: SymbolTokenizer.encode: unknown symbol 'D'"),
    (b"\n  \n\n", "text", "holds no samples (3 empty lines skipped)"),
    (b"", "jsonl", "holds no samples (0 empty lines skipped)"),
])
def test_bad_input_is_one_error_naming_file_and_line(tmp_path, capsys, content, fmt, message):
    source = tmp_path / "docs"
    source.write_bytes(content)
    output = tmp_path / "prepared"
    assert main(["data", "prepare", str(source), "-o", str(output), "--tokenizer", "builtin",
                 "--format", fmt, "--val-fraction", "0", "--test-fraction", "0"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("xdllm: error: ")
    assert message.replace("docs:", f"{source}:") in error[0]
    assert not output.exists() and not [path for path in tmp_path.iterdir() if ".tmp-" in path.name]


def test_a_jsonl_input_without_a_format_is_refused_rather_than_trained_on_as_text(tmp_path, capsys):
    source = tmp_path / "pairs.jsonl"
    source.write_text('{"prompt": "a b", "response": "b a"}\n' * 8)
    output = tmp_path / "prepared"
    assert main(["data", "prepare", str(source), "-o", str(output), "--tokenizer", "builtin"]) == 2
    assert (f"xdllm: error: data prepare: {source} is a JSON-lines file, whose lines --format text (the default) "
            "would train on as text, braces and field names included: give --format jsonl") in capsys.readouterr().err
    assert not output.exists()
    assert main(["data", "prepare", str(source), "-o", str(output), "--tokenizer", "builtin", "--format",
                 "prompt_response", "--val-fraction", "0.25", "--test-fraction", "0.25"]) == 0


@pytest.mark.slow
def test_the_suggested_train_line_trains(tmp_path, capsys):
    """Pasted into a shell as printed, from a folder whose name Hydra reads only in quotes."""
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps({"prompt": f"{i % 10} {i // 10 % 10}", "response": f"{i % 7}"}) + "\n"
                              for i in range(300)))
    prepared = tmp_path / "prepared (copy) ä"
    assert main(["data", "prepare", str(source), "-o", str(prepared), "--tokenizer", "builtin",
                 "--format", "prompt_response", "--workers", "1"]) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("train on it: xdllm train ") and "collator=" not in line
    overrides = shlex.split(line.removeprefix("train on it: xdllm train "))  # as a shell passes them
    assert overrides[1] == f"task.params.path='{prepared}'"
    assert overrides[-3:] == ["mlm.target_length=${derived.max_new_tokens}", "data.num_val_samples=3",
                              "data.num_test_samples=3"]
    assert main(["train", *overrides, "model.d_model=32", "model.n_layers=1", "model.n_heads=2",
                 "trainer.max_steps=2", "trainer.val_check_interval=2", "history.num_samples=0",
                 "trainer.enable_model_summary=false", f"run_dir={tmp_path / 'run'}"]) == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["num_samples"] == 3
    config = OmegaConf.load(tmp_path / "run" / "config.yaml")
    assert config.task.params.path == str(prepared)
    assert config.collator.train.target_length == config.collator.val.target_length == 2  # response "6" + EOS


@pytest.mark.slow
def test_the_suggested_train_line_fits_long_pieces_and_a_small_test_split(tmp_path, capsys):
    """Pieces of 600 tokens (602 with bos and eos) outgrow the packed rows (128) and the model's
    positions (512): the printed line raises both, and trains and generates as printed (it stopped
    at the positions before, and a cut row length trained every piece as chunks of 128)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    source = tmp_path / "books.txt"
    source.write_text("".join(" ".join(letters[(i + j) % 26] for j in range(600)) + "\n" for i in range(150)))
    prepared = tmp_path / "prepared"
    assert main(["data", "prepare", str(source), "-o", str(prepared), "--tokenizer", "builtin", "--max-tokens", "600",
                 "--workers", "1"]) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    overrides = shlex.split(line.removeprefix("train on it: xdllm train "))
    assert overrides[4:] == ["collator.train.row_length=602", "collator.val.row_length=602", "data.num_val_samples=2",
                             "data.num_test_samples=2", "model.max_positions=602"]
    assert main(["train", *overrides, "model.d_model=16", "model.n_layers=1", "model.n_heads=2", "data.batch_size=2",
                 "trainer.max_steps=1", "trainer.val_check_interval=1", "history.num_samples=0",
                 "predictor.max_steps=2", "trainer.enable_model_summary=false", f"run_dir={tmp_path / 'run'}"]) == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["text_samples"] == 8  # not bounded by the split


def test_the_suggested_train_line_of_data_without_a_test_split_keeps_no_test_samples(tmp_path, capsys):
    source = tmp_path / "corpus.txt"
    source.write_text("\n".join(_lines(100)) + "\n")
    assert main(["data", "prepare", str(source), "-o", str(tmp_path / "out"), "--tokenizer", "builtin",
                 "--val-fraction", "0.05", "--test-fraction", "0", "--workers", "1"]) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.endswith(" collator=packed_mlm data.num_val_samples=5 data.num_test_samples=0")  # trains as printed


def test_line_numbers_count_across_chunks(tmp_path):
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": "a b"}) + "\n" for _ in range(40)) + "{oops\n")
    with pytest.raises(XdllmError, match=rf"{source}:41: not valid JSON"):
        prepare(PrepareOptions(inputs=[source], output=tmp_path / "out", tokenizer="builtin",
                               record_format=RecordFormat("jsonl"), chunk_bytes=64))


def test_options_are_checked_before_anything_is_written(tmp_path):
    source = tmp_path / "corpus.txt"
    source.write_text("a b\nc d\n")
    existing = tmp_path / "existing"
    existing.mkdir()
    for options, message in [
        (dict(output=existing), "already exists"),
        (dict(val_fraction=0.6, test_fraction=0.5), "must be below 1"),
        (dict(workers=0), "--workers must be >= 1"),
        (dict(inputs=[tmp_path / "missing.txt"]), "is not a file"),
        (dict(inputs=[source, source]), f"input {source} is {source} given again"),
        (dict(val_fraction=0.5, test_fraction=0.4), "leave none for training"),
    ]:
        arguments = dict(inputs=[source], output=tmp_path / "new", tokenizer="builtin") | options
        with pytest.raises(XdllmError, match=message):
            prepare(PrepareOptions(**arguments))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt", "existing"]


def test_a_file_given_twice_under_another_name_is_refused(tmp_path):
    """``data/*.txt data/extra.txt``, or a link to an input: the documents would be prepared twice
    and a held-out copy of one trained on."""
    source = tmp_path / "corpus.txt"
    source.write_text("a b\nc d\n")
    (tmp_path / "link.txt").symlink_to(source)
    with pytest.raises(XdllmError, match=f"input {tmp_path}/link.txt is {source} given again: its documents would "
                                         "be prepared twice"):
        prepare(PrepareOptions(inputs=[source, tmp_path / "link.txt"], output=tmp_path / "new", tokenizer="builtin"))
    assert not (tmp_path / "new").exists()


def test_held_out_counts_round_and_keep_at_least_one():
    assert held_out_counts(1000, 0.01, 0.0) == (10, 0)
    assert held_out_counts(10, 0.01, 0.01) == (1, 1)
    assert held_out_counts(3, 0.0, 0.0) == (0, 0)


def test_token_ids_are_stored_narrow_and_read_memory_mapped(tmp_path):
    source = tmp_path / "corpus.txt"
    source.write_text("a b c\n")
    prepare(PrepareOptions(inputs=[source], output=tmp_path / "p", tokenizer="builtin", val_fraction=0.0,
                           test_fraction=0.0))
    split = PreparedData(tmp_path / "p").split("train")
    assert isinstance(split.tokens, np.memmap) and split.tokens.dtype == np.uint16
    assert isinstance(split.offsets, np.memmap) and split.offsets.tolist() == [0, 3]


def test_a_killed_preparation_leaves_nothing_the_next_one_keeps(tmp_path):
    source = tmp_path / "corpus.txt"
    source.write_text("a b\n")
    abandoned = tmp_path / ".prepared.tmp-999999999"  # no such process
    (abandoned / "parts").mkdir(parents=True)
    running = tmp_path / f".prepared.tmp-{os.getppid()}"  # its writer still runs: left alone
    running.mkdir()
    prepare(PrepareOptions(inputs=[source], output=tmp_path / "prepared", tokenizer="builtin", val_fraction=0.0,
                           test_fraction=0.0))
    assert not abandoned.exists() and running.is_dir() and (tmp_path / "prepared" / "manifest.json").is_file()


def test_documents_other_than_lines_are_for_text_only(tmp_path, capsys):
    source = tmp_path / "pairs.jsonl"
    source.write_text('{"prompt": "a", "response": "b"}\n')
    code = main(["data", "prepare", str(source), "-o", str(tmp_path / "out"), "--tokenizer", "builtin",
                 "--format", "prompt_response", "--documents", "paragraph"])
    assert code == 2
    assert capsys.readouterr().err.strip() == ("xdllm: error: --documents paragraph is for --format text; in "
                                              "prompt_response each line is one record")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("read_as", "option", "reader"), [
    ("text", "--prompt-field", "prompt_response"), ("text", "--text-field", "jsonl"),
    ("jsonl", "--response-field", "prompt_response"), ("prompt_response", "--text-field", "jsonl")])
def test_a_field_option_of_another_format_is_refused(tmp_path, capsys, read_as, option, reader):
    """It was ignored: ``--format text --prompt-field q`` prepared each line as a document."""
    source = tmp_path / "lines.jsonl"
    source.write_text('{"text": "a", "prompt": "a", "response": "b"}\n')
    code = main(["data", "prepare", str(source), "-o", str(tmp_path / "out"), "--tokenizer", "builtin",
                 "--format", read_as, option, "q"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (f"xdllm: error: data prepare: {option} is for --format {reader}; "
                                              f"--format {read_as} does not read it")
    assert not (tmp_path / "out").exists()
