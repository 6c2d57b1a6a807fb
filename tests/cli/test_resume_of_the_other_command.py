"""`resume=` given to the command that did not make the folder (a generation's to `xdllm train`, a
training run's or sweep's to `xdllm generate`) is one line naming the command that continues it;
they said the folder had no checkpoint, was damaged, or was no generation folder."""

import pytest
import yaml

from xdllm.cli.main import main
from xdllm.folder_names import folder_kind


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """Folders as xdllm writes them, with the files that say what they are."""
    monkeypatch.chdir(tmp_path)
    for folder, name, content in [("run", "config.yaml", {"seed": 0}),
                                  ("run/generate/g", "generate.yaml", {"checkpoint": "x"}),
                                  ("gsweep", "sweep.yaml", {"overrides": [], "checkpoint": "x", "global_step": 1}),
                                  ("tsweep", "sweep.yaml", {"runs": []})]:
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / name).write_text(yaml.safe_dump(content))
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "sweep.yaml").write_text("runs: [\n")


def test_each_folder_is_known_by_the_files_xdllm_wrote(folders, tmp_path):
    kinds = {name: folder_kind(tmp_path / name) for name in ("run", "run/generate/g", "gsweep", "tsweep", "damaged")}
    assert kinds == {"run": "training run", "run/generate/g": "generation", "gsweep": "generation sweep",
                     "tsweep": "training sweep", "damaged": None}


@pytest.mark.parametrize("command, folder, said", [
    ("train", "run/generate/g", "resume=run/generate/g is a generation's folder: continue it with xdllm generate "
                                "resume=run/generate/g; xdllm train resume= takes a training run's folder or "
                                "checkpoint, or a training sweep's"),
    ("train", "gsweep", "resume=gsweep is a generation sweep's folder: continue it with xdllm generate resume=gsweep"),
    ("generate", "tsweep", "resume=tsweep is a training sweep's folder: continue it with xdllm train resume=tsweep; "
                           "xdllm generate resume= takes a stopped generation's or a generation sweep's"),
    ("generate", "run", "resume=run is a training run's folder: continue it with xdllm train resume=run, or generate "
                        "from it with xdllm generate ckpt=run;"),
])
def test_resume_of_the_other_command_s_folder_names_the_command_that_continues_it(folders, capsys, command, folder,
                                                                                  said):
    assert main([command, f"resume={folder}"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"xdllm: error: {said}") and len(error.strip().splitlines()) == 1
