"""History files: plain-torch layout, atomic writes, and loud failures on damaged files."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from xdllm.history import (
    FORMAT_NAME,
    HistoryError,
    HistoryFormatError,
    HistoryTopKPlugin,
    find_history_files,
    iter_samples,
    load_history,
)
from xdllm.history.format import TENSOR_FIELDS
from xdllm.history.storage import write_history_file


@pytest.fixture
def history_path(tmp_path, generate):
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "history", mask_token_id=1)
    generate(recorder, prompt_lens=[2, 3], gen_len=4, commits_per_step=[1, 2])
    return recorder.files_written[0]


def test_plain_torch_layout(history_path):
    payload = torch.load(history_path, weights_only=True)
    assert payload["format"] == FORMAT_NAME and payload["version"] == 1 and payload["k"] == 2
    steps, region = payload["steps"].shape[0], payload["canvas_len"] - payload["region_start"]
    assert payload["region_start"] == 2 and region == 5 and steps == 5
    for name, field in TENSOR_FIELDS.items():
        assert payload[name].dtype == field.dtype, name
    assert payload["topk_ids"].shape == (2, steps, region, 2)
    assert payload["canvas"].shape == payload["committed"].shape == (2, steps, region)
    assert payload["num_steps"].tolist() == [5, 2]
    assert payload["mask_token_id"] == 1 and payload["texts"] == ["row 0", "row 1"]
    assert list(history_path.parent.iterdir()) == [history_path]  # no temp file left behind


def test_a_file_and_a_sample_print_in_one_line(history_path):
    """A sample printed every tensor it holds: hundreds of lines in a notebook."""
    history = load_history(history_path)
    assert repr(history) == f"HistoryFile('{history_path}', samples=2, k=2)"
    first, second = history
    assert repr(first) == "SampleHistory(sample_id=0, steps=5, region=5, k=2, prompt_tokens=2, text='row 0')"
    assert repr(second).startswith("SampleHistory(sample_id=1, steps=2, region=4, k=2, prompt_tokens=3, ")
    long = dataclasses.replace(first, text="7 " * 40, split="test")
    assert repr(long) == ("SampleHistory(sample_id=0, split='test', steps=5, region=5, k=2, prompt_tokens=2, "
                          f"text='{'7 ' * 30}... (20 more characters)')")


def test_truncated_file_names_the_file(history_path):
    data = history_path.read_bytes()
    for length in (100, len(data) // 2, len(data) - 10):
        history_path.write_bytes(data[:length])
        with pytest.raises(HistoryFormatError, match=f"{history_path}: cannot be read as a history file"):
            load_history(history_path)
    history_path.write_bytes(b"")
    empty = rf"{history_path}: cannot be read as a history file \(an empty file, 0 bytes\)"
    with pytest.raises(HistoryFormatError, match=empty):
        load_history(history_path)


def test_garbled_tensor_bytes_fail_the_checksum(history_path):
    payload = torch.load(history_path, weights_only=True)
    data = bytearray(history_path.read_bytes())
    needle = payload["topk_probs"].contiguous().view(torch.uint8).numpy().tobytes()
    offset = bytes(data).find(needle)
    assert offset > 0
    data[offset + 3] ^= 0x40
    history_path.write_bytes(bytes(data))
    with pytest.raises(HistoryFormatError, match=r"checksum mismatch in \['topk_probs'\]"):
        load_history(history_path)


def test_random_garbage_is_rejected(tmp_path):
    path = tmp_path / "history-00000.pt"
    path.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(HistoryFormatError, match=str(path)):
        load_history(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.pop("committed"), r"missing keys \['committed'\]"),
        (lambda p: p.update(format="something.else"), "not a denoising-history file"),
        (lambda p: p.update(version=99), "unsupported history format version 99"),
        (lambda p: p.update(canvas=p["canvas"][:, :-1]), "inconsistent shapes: key 'canvas' has S=4"),
        (lambda p: p.update(topk_probs=p["topk_probs"].float()), "dtype torch.float32"),
        (lambda p: p.update(k=3), "k=3 but topk_ids has K=2"),
        (lambda p: p.update(texts=["only one"]), "1 texts for 2 samples"),
        (lambda p: p.update(num_steps=p["num_steps"] + 1), "num_steps does not match"),
    ],
)
def test_schema_violations_name_file_and_problem(history_path, edit, message):
    payload = torch.load(history_path, weights_only=True)
    edit(payload)
    torch.save(payload, history_path)
    with pytest.raises(HistoryFormatError, match=message) as error:
        load_history(history_path)
    assert str(history_path) in str(error.value)


def test_a_checkpoint_given_as_a_history_file_is_named_as_one(tmp_path):
    """It said ``not a denoising-history file (format=None, expected 'xdllm.history.topk')``."""
    path = tmp_path / "best.ckpt"
    torch.save({"state_dict": {}, "global_step": 3}, path)
    with pytest.raises(HistoryFormatError, match=f"{path}: a training checkpoint, not a denoising-history file: "
                                                 "those are the history-NNNNN.pt of a history/ folder"):
        load_history(path)


def test_invalid_payload_is_never_written(history_path):
    payload = torch.load(history_path, weights_only=True)
    payload["canvas"] = payload["canvas"][:1]
    target = history_path.parent / "history-00001.pt"
    with pytest.raises(HistoryFormatError, match="inconsistent shapes"):
        write_history_file(payload, target)
    assert not target.exists()
    assert sorted(p.name for p in history_path.parent.iterdir()) == [history_path.name]


def test_finding_files_in_a_run_directory(tmp_path, generate):
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "history")
    for seed in range(3):
        generate(recorder, prompt_lens=[1, 1], gen_len=2, commits_per_step=[1, 1], seed=seed)
    (tmp_path / "history" / "notes.txt").write_text("ignored")
    expected = [tmp_path / "history" / f"history-{i:05d}.pt" for i in range(3)]
    assert find_history_files(tmp_path) == expected
    assert find_history_files(tmp_path / "history") == expected
    assert [s.sample_id for s in iter_samples(tmp_path, max_samples=5)] == [0, 1, 2, 3, 4]
    with pytest.raises(HistoryError, match="no such file or directory"):
        find_history_files(tmp_path / "missing_dir")
    (tmp_path / "empty").mkdir()
    with pytest.raises(HistoryError, match=r"empty: no history files \(history-NNNNN.pt\) found under it$"):
        find_history_files(tmp_path / "empty")
    with pytest.raises(HistoryError, match="no such history file"):
        load_history(tmp_path / "missing.pt")


def test_a_folder_of_generations_without_history_says_so(tmp_path):
    """A generation sweep run without ``history=topk`` was refused as holding no history files, not why."""
    for name in ("threshold=0.5", "threshold=0.9"):
        (tmp_path / "sweep" / name).mkdir(parents=True)
        (tmp_path / "sweep" / name / "generate.yaml").write_text("history: null\n")
    why = re.escape("ran without history (xdllm generate records it with history=topk)")
    with pytest.raises(HistoryError, match=rf"sweep: no history files .* found under it: its 2 generations {why}"):
        find_history_files(tmp_path / "sweep")
    with pytest.raises(HistoryError, match=rf"threshold=0.5: no .* found under it: its generation {why}"):
        find_history_files(tmp_path / "sweep" / "threshold=0.5")


def test_finding_files_in_nested_validation_folders(tmp_path, generate):
    for step in (250, 500):
        recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "history" / f"val-step{step:07d}")
        for seed in range(2):
            generate(recorder, prompt_lens=[1, 1], gen_len=2, commits_per_step=[1, 1], seed=seed)
    found = find_history_files(tmp_path)
    assert [(p.parent.name, p.name) for p in found] == [
        ("val-step0000250", "history-00000.pt"), ("val-step0000250", "history-00001.pt"),
        ("val-step0000500", "history-00000.pt"), ("val-step0000500", "history-00001.pt")]
