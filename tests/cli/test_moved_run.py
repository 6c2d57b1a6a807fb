"""A run copied to another machine, or whose tokenizer file and data moved since training,
still generates: its checkpoints store the tokenizer, and ``data_path=`` says where the data is."""

import json
import shutil
from pathlib import Path

import pytest
from test_tokenizer_train import corpus_lines
from tiny_run import TINY, TINY_TEXT

import xdllm
from xdllm.cli.main import main
from xdllm.data.tokenizer import HFTokenizerFile
from xdllm.errors import XdllmError
from xdllm.run.stored_tokenizer import TOKENIZER_KEY
from xdllm.train.checkpoint_io import read_checkpoint_file


def _texts(output_dir: Path) -> list[str]:
    return [json.loads(line)["text"] for line in (output_dir / "predictions.jsonl").read_text().splitlines()]


def _generate(capsys, *overrides: str) -> tuple[int, str]:
    code = main(["generate", *overrides, "num_samples=4", "predictor.temperature=0.0"])
    return code, capsys.readouterr().err


@pytest.fixture
def moved_text_run(tmp_path, monkeypatch, capsys) -> tuple[Path, Path, list[str]]:
    """A text run trained in ``machine_a`` and copied to ``machine_b`` (its corpus too, to another
    folder); ``machine_a`` is gone. Returns the copied run, the copied corpus and the greedy texts
    the run generated before the move."""
    machine_a = tmp_path / "machine_a"
    machine_a.mkdir()
    monkeypatch.chdir(machine_a)
    (machine_a / "corpus.txt").write_text("\n".join(corpus_lines()) + "\n")
    assert main(["tokenizer", "train", "corpus.txt", "-o", "tokenizer.json", "--vocab-size", "300"]) == 0
    assert main(["train", "task=text_file", "task.params.path=corpus.txt", "tokenizer=tokenizer.json", "model=mdlm",
                 *TINY_TEXT, "generate_after_train=false", "run_dir=run"]) == 0
    assert _generate(capsys, "ckpt=run", "output_dir=before")[0] == 0
    before = _texts(machine_a / "before")
    machine_b = tmp_path / "machine_b"
    shutil.copytree(machine_a / "run", machine_b / "runs" / "run")
    shutil.copy(machine_a / "corpus.txt", machine_b / "data.txt")
    shutil.rmtree(machine_a)
    monkeypatch.chdir(machine_b)
    capsys.readouterr()
    return machine_b / "runs" / "run", machine_b / "data.txt", before


def test_a_copied_run_generates_the_same_text_with_its_data_path_given(moved_text_run, capsys):
    run, data, before = moved_text_run
    code, error = _generate(capsys, f"ckpt={run}", "output_dir=nodata")
    assert code == 0, error  # free text reads nothing of its data (it was refused, naming data_path=)
    assert _texts(Path("nodata")) == before
    assert main(["eval", f"ckpt={run}"]) == 2  # the loss needs the documents
    error = capsys.readouterr().err
    assert "xdllm: error: the test split needs the run's data, and task text_file's task.params.path=" in error
    assert str(Path("machine_a") / "corpus.txt") in error
    assert error.rstrip().endswith("is not here: if it moved since training, or the run was copied from another "
                                   "machine, give its place now: data_path=<folder or file> (generation from "
                                   "prompts_file=... or xdllm.complete, and of free text, needs no data)")
    code, error = _generate(capsys, f"ckpt={run}", f"data_path={data}.gone", "output_dir=nodata")
    assert code == 2 and f"no such file {data}.gone" in error and "data_path=<" not in error
    code, error = _generate(capsys, f"ckpt={run}", f"data_path={data.parent}", "output_dir=nodata")
    assert code == 2 and f"task text_file: {data.parent} is a folder, not a text file" in error
    code, error = _generate(capsys, f"ckpt={run}", f"data_path={data}", "output_dir=after")
    assert code == 0, error
    assert _texts(Path("after")) == before  # no tokenizer file anywhere: the checkpoint's own


def test_the_stored_tokenizer_wins_over_a_file_rewritten_since_training(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("\n".join(corpus_lines()) + "\n")
    assert main(["tokenizer", "train", "corpus.txt", "-o", "tokenizer.json", "--vocab-size", "300"]) == 0
    trained_with = HFTokenizerFile("tokenizer.json")
    assert main(["train", "task=text_file", "task.params.path=corpus.txt", "tokenizer=tokenizer.json", "model=mdlm",
                 *TINY_TEXT, "generate_after_train=false", "run_dir=run"]) == 0
    stored = read_checkpoint_file(tmp_path / "run" / "checkpoints" / "last.ckpt")[TOKENIZER_KEY]
    assert stored == trained_with.serialized()
    assert _generate(capsys, "ckpt=run", "output_dir=before")[0] == 0
    assert main(["tokenizer", "train", "corpus.txt", "-o", "tokenizer.json", "--vocab-size", "280", "--overwrite"]) == 0
    assert HFTokenizerFile("tokenizer.json").fingerprint != trained_with.fingerprint
    assert _generate(capsys, "ckpt=run", "output_dir=after")[0] == 0
    assert _texts(tmp_path / "after") == _texts(tmp_path / "before")


def test_data_path_is_refused_for_a_task_that_reads_no_file(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=1", "trainer.val_check_interval=1", f"run_dir={run}"]) == 0
    assert read_checkpoint_file(run / "checkpoints" / "last.ckpt").get(TOKENIZER_KEY) is None  # built-in: not stored
    capsys.readouterr()
    code, error = _generate(capsys, f"ckpt={run}", f"data_path={tmp_path}")
    assert code == 2
    assert error.strip() == (f"xdllm: error: data_path={tmp_path}: the run's task sort reads no data file or folder "
                             "(it has no task.params.path); data_path= is for runs trained on prepared data or a "
                             "text file")


def test_a_resumed_run_keeps_its_tokenizer_when_the_file_was_rewritten(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("\n".join(corpus_lines()) + "\n")
    assert main(["tokenizer", "train", "corpus.txt", "-o", "tokenizer.json", "--vocab-size", "300"]) == 0
    trained_with = HFTokenizerFile("tokenizer.json").serialized()
    text_run = ["train", "task=text_file", "task.params.path=corpus.txt", "tokenizer=tokenizer.json", "model=mdlm",
                *TINY_TEXT, "generate_after_train=false", "run_dir=run"]
    assert main(text_run) == 0
    assert main(["tokenizer", "train", "corpus.txt", "-o", "tokenizer.json", "--vocab-size", "280", "--overwrite"]) == 0
    assert main(["train", "resume=run", "trainer.max_steps=6"]) == 0
    assert f"tokenizer={tmp_path / 'tokenizer.json'} is not the tokenizer this run trained with; the run continues " \
           "with its own, which its checkpoints store" in caplog.text
    resumed = read_checkpoint_file(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert resumed["global_step"] == 6 and resumed[TOKENIZER_KEY] == trained_with
    (tmp_path / "tokenizer.json").unlink()
    assert main(["train", "resume=run", "trainer.max_steps=7"]) == 0
    assert "is gone; the run continues with its own" in caplog.text


def test_a_copied_run_generates_from_prompts_without_its_data(moved_text_run, capsys):
    """Prompts given need no training data: a copied run whose corpus is not at hand refused them
    too (loading it built its task, which read the corpus)."""
    run, data, _ = moved_text_run
    Path("prompts.txt").write_text("the\nthe little\n" * 2)  # num_samples=4: the file's first 4 prompts
    code, error = _generate(capsys, f"ckpt={run}", "prompts_file=prompts.txt", "output_dir=nodata")
    assert code == 0, error
    code, error = _generate(capsys, f"ckpt={run}", "prompts_file=prompts.txt", f"data_path={data}",
                            "output_dir=withdata")
    assert code == 0, error
    assert _texts(Path("nodata")) == _texts(Path("withdata"))
    loaded = xdllm.load_trained(run)
    assert [c["text"] for c in xdllm.complete(loaded, ["the"], predictor={"temperature": 0.0})] == \
        _texts(Path("withdata"))[:1]
    with pytest.raises(XdllmError, match=r"^the run's datamodule needs the run's data, .* data_path="):
        loaded.datamodule()
