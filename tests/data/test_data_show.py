"""``xdllm data show DIR``: a prepared dataset's manifest in a few lines, its first samples decoded
with the tokenizer it was prepared with, and the command that trains on it."""

import ast
import json
import shutil
from pathlib import Path

import pytest

from xdllm.cli.main import main

STORIES = Path(__file__).resolve().parents[2] / "experiments" / "data"


@pytest.fixture(scope="module")
def stories(tmp_path_factory) -> Path:
    """60 lines of the shipped stories, prepared with their tokenizer file (a copy, to move)."""
    folder = tmp_path_factory.mktemp("stories")
    source = folder / "stories.txt"
    source.write_text("".join((STORIES / "stories.txt").read_text().splitlines(keepends=True)[:60]) + "\n\n")
    shutil.copy(STORIES / "stories_tokenizer.json", folder / "tokenizer.json")
    assert main(["data", "prepare", str(source), "-o", str(folder / "prepared"), "--tokenizer",
                 str(folder / "tokenizer.json"), "--val-fraction", "0.1", "--test-fraction", "0.05",
                 "--workers", "1"]) == 0
    return folder


def _shown(capsys, *arguments: str) -> list[str]:
    assert main(["data", "show", *arguments]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_text_dataset_shows_its_splits_and_first_documents_decoded(stories, capsys):
    prepared = stories / "prepared"
    lines = _shown(capsys, str(prepared), "--samples", "2")
    source_lines = (STORIES / "stories.txt").read_text().splitlines()[:60]
    manifest = json.loads((prepared / "manifest.json").read_text())
    assert lines[0] == (f"{prepared}: text documents, prepared {manifest['created']} from 1 file "
                        f"({stories / 'stories.txt'})")
    assert lines[1] == (f"tokenizer: {stories / 'tokenizer.json'} (81 tokens, fingerprint "
                        f"{manifest['tokenizer']['fingerprint'][:12]}), ids stored as uint16")
    assert lines[2].split() == ["split", "samples", "tokens", "longest", "prompt", "longest", "target"]
    assert [line.split()[:2] for line in lines[3:6]] == [["train", "51"], ["validation", "6"], ["test", "3"]]
    assert lines[6] == "skipped 2 empty lines, 0 unknown tokens"
    assert lines[8] == "the first 2 samples of train:"
    stored = manifest["splits"]["train"]
    assert lines[3].split()[2] == f"{stored['tokens']:,}"
    label, text = lines[9].split(": ", 1)
    assert label.startswith("train 0 (") and ast.literal_eval(text) in source_lines  # a stored document, decoded
    assert lines[-1] == (f"train on it: xdllm train task=prepared task.params.path={prepared} "
                         f"tokenizer={stories / 'tokenizer.json'} collator=packed_mlm data.num_val_samples=6 "
                         "data.num_test_samples=3")


def test_pairs_show_prompt_and_response_and_a_short_split_shows_whole(tmp_path, capsys):
    source = tmp_path / "pairs.jsonl"
    pairs = [{"prompt": f"{i % 10} + {i // 10}", "response": " ".join(str(i % 10 + i // 10))} for i in range(20)]
    source.write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    assert main(["data", "prepare", str(source), "-o", str(tmp_path / "p"), "--tokenizer", "builtin",
                 "--format", "prompt_response", "--workers", "1"]) == 0
    capsys.readouterr()
    lines = _shown(capsys, str(tmp_path / "p"), "--split", "test", "--samples", "5")
    assert lines[0].startswith(f"{tmp_path / 'p'}: prompt/response pairs, prepared ")
    assert lines[8] == "its one sample of test:"
    prompt, response = lines[9:11]
    assert prompt.startswith("test 0: prompt (3 tokens) '") and response.lstrip().startswith("response (")
    assert "mlm.target_length=${derived.max_new_tokens}" in lines[-1]


def test_a_tokenizer_file_that_moved_leaves_token_ids_until_given(stories, tmp_path, capsys):
    moved = tmp_path / "prepared"
    shutil.copytree(stories / "prepared", moved)
    manifest = json.loads((moved / "manifest.json").read_text())
    manifest["tokenizer"]["source"] = str(tmp_path / "gone.json")
    (moved / "manifest.json").write_text(json.dumps(manifest))
    lines = _shown(capsys, str(moved), "--samples", "1")
    assert lines[8].startswith(f"the first 1 sample of train, as token ids: its tokenizer {tmp_path / 'gone.json'} "
                               "cannot be read (")
    assert all(word.isdigit() for word in lines[9].split(": ", 1)[1].split())
    assert lines[-1].startswith(f"train on it (with tokenizer= where {tmp_path / 'gone.json'} is now): ")
    lines = _shown(capsys, str(moved), "--samples", "1", "--tokenizer", str(stories / "tokenizer.json"))
    assert lines[8] == "the first 1 sample of train:" and lines[9].endswith("'")


@pytest.mark.parametrize("arguments, error", [
    (["--split", "dev"], "--split 'dev': a prepared dataset's splits are train, validation, test"),
    (["--samples", "-1"], "--samples must be 0 or more, got -1"),
    (["--tokenizer", "builtin"], "--tokenizer builtin is not the tokenizer {prepared} was prepared with"),
    (["--tokenizer", "builtin", "--samples", "0"], "--tokenizer builtin is not the tokenizer {prepared}"),
    (["--tokenizer", "missing.json"], "--tokenizer missing.json: "),
])
def test_wrong_options_are_one_line(stories, capsys, arguments, error):
    prepared = stories / "prepared"
    assert main(["data", "show", str(prepared), *arguments]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"xdllm: error: {error.format(prepared=prepared)}")


def test_a_folder_that_is_no_prepared_dataset_is_one_line(tmp_path, capsys):
    assert main(["data", "show", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"xdllm: error: {tmp_path} is not a prepared dataset: it has no "
                                       "manifest.json (make one with `xdllm data prepare`)\n")
