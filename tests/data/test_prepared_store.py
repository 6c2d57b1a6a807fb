"""Reading prepared data: a folder that is missing, not prepared, or damaged is one clear error."""

import json

import numpy as np
import pytest
from prepared_data_helpers import prepare_documents

from xdllm.cli.main import main
from xdllm.data.prepared_store import PreparedData, array_path


@pytest.fixture
def prepared(tmp_path):
    folder = tmp_path / "docs"
    prepare_documents(folder, 20)
    return folder


def test_missing_or_unprepared_folders_are_named(tmp_path, capsys):
    with pytest.raises(ValueError, match="does not exist"):
        PreparedData(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="has no manifest.json"):
        PreparedData(tmp_path)
    (tmp_path / "corpus.txt").write_text("a b\n")
    with pytest.raises(ValueError, match=r"corpus.txt is a file, not the folder `xdllm data prepare` makes"):
        PreparedData(tmp_path / "corpus.txt")
    assert main(["train", "task=prepared", f"task.params.path={tmp_path / 'nowhere'}",
                 f"run_dir={tmp_path / 'run'}"]) == 2
    assert f"prepared data {tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("change, message", [
    (lambda manifest: manifest.update(version=99), "format version 99"),
    (lambda manifest: manifest.update(kind="images"), "unknown kind 'images'"),
    (lambda manifest: manifest.update(format="other"), "not the manifest of an xdllm prepared dataset"),
])
def test_a_manifest_of_another_format_is_refused(prepared, change, message):
    manifest = json.loads((prepared / "manifest.json").read_text())
    change(manifest)
    (prepared / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=message):
        PreparedData(prepared)


def test_an_unreadable_manifest_is_named(prepared):
    (prepared / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable manifest"):
        PreparedData(prepared)


def test_arrays_that_disagree_with_the_manifest_are_refused(prepared):
    np.save(array_path(prepared, "train", "offsets"), np.array([0, 3], dtype=np.int64))
    with pytest.raises(ValueError, match="the folder is damaged"):
        PreparedData(prepared).split("train")
    array_path(prepared, "test", "tokens").unlink()
    with pytest.raises(ValueError, match="test.tokens.npy is missing"):
        PreparedData(prepared).split("test")
