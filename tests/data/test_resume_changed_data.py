"""A resumed run whose data changed since its checkpoint (a text_file corpus edited, a prepared
dataset made again from other sources) says so: it trains and validates on other samples than
the run it continues, which resumed silently before. The same data prepared again is the same."""

import shutil
from pathlib import Path

from prepared_data_helpers import prepare_documents

from xdllm.cli.main import main

STORIES = Path(__file__).parents[2] / "experiments" / "data"
SMALL = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "trainer.val_check_interval=2",
         "data.batch_size=4", "history.num_samples=0", "generate_after_train=false",
         "trainer.enable_model_summary=false", "torch_threads=1"]
CHANGED = "has changed since"


def _resume_says(run_dir: Path, steps: int, capsys) -> str:
    capsys.readouterr()
    assert main(["train", f"resume={run_dir}", f"trainer.max_steps={steps}"]) == 0
    return capsys.readouterr().err


def test_an_edited_text_file_is_said_on_resume(tmp_path, capsys):
    corpus, run_dir = tmp_path / "corpus.txt", tmp_path / "run"
    shutil.copy(STORIES / "stories.txt", corpus)
    assert main(["train", "task=text_file", f"task.params.path={corpus}", "task.params.max_tokens=16",
                 f"tokenizer={STORIES / 'stories_tokenizer.json'}", "data.num_val_samples=8",
                 "data.num_test_samples=8", "trainer.max_steps=2", *SMALL, f"run_dir={run_dir}"]) == 0
    assert CHANGED not in _resume_says(run_dir, 4, capsys)
    corpus.write_text(corpus.read_text() + "the fox went home .\n")
    said = _resume_says(run_dir, 6, capsys)
    assert f"the data of task text_file (task.params.path={corpus}) {CHANGED}" in said
    assert "from step 4 on the run trains and validates on other samples than the run it continues" in said


def test_a_prepared_dataset_made_again_from_other_sources_is_said_on_resume(tmp_path, capsys):
    folder, run_dir = tmp_path / "docs", tmp_path / "run"
    prepare_documents(folder, 50)
    assert main(["train", "task=prepared", f"task.params.path={folder}", "data.num_val_samples=5",
                 "data.num_test_samples=5", "trainer.max_steps=2", *SMALL, f"run_dir={run_dir}"]) == 0
    shutil.rmtree(folder)
    prepare_documents(folder, 50)  # the same documents prepared again: only the manifest's time differs
    assert CHANGED not in _resume_says(run_dir, 4, capsys)
    shutil.rmtree(folder)
    prepare_documents(folder, 60)
    assert f"the data of task prepared (task.params.path={folder}) {CHANGED}" in _resume_says(run_dir, 6, capsys)


def test_a_resume_of_prepared_data_may_change_the_seed(tmp_path, capsys):
    """Its splits were kept apart when it was prepared: no seed draws held-out samples from training's."""
    folder, run_dir = tmp_path / "docs", tmp_path / "run"
    prepare_documents(folder, 50)
    assert main(["train", "task=prepared", f"task.params.path={folder}", "data.num_val_samples=5",
                 "data.num_test_samples=5", "trainer.max_steps=2", *SMALL, f"run_dir={run_dir}"]) == 0
    assert main(["train", f"resume={run_dir}", "trainer.max_steps=4", "seed=1"]) == 0
