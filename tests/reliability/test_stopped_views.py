"""A generation stopped while the TensorBoard views of its history were drawn: its predictions are
whole, its views are not; ``resume=`` draws the views again (``views.unfinished`` marks them as
unfinished until they are whole) instead of saying there is nothing to continue."""

import json
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from xdllm.cli.main import main
from xdllm.run import generate as generate_module

GENERATE = ["num_samples=12", "batch_size=4", "history=topk", "history_tensorboard_samples=2"]


def _generate(run: Path, folder: Path) -> list[str]:
    return ["generate", f"ckpt={run}", *GENERATE, f"output_dir={folder}"]


def _image_tags(folder: Path) -> list[str]:
    """The image tags of the generation's one views event file, each once per picture."""
    (views,) = (folder / "tensorboard").glob("*.history")
    events = EventAccumulator(str(views), size_guidance={"images": 0})
    events.Reload()
    return [tag for tag in events.Tags()["images"] for _ in events.Images(tag)]


def _stop_in_views(monkeypatch, after_pictures: int) -> None:
    """The next generation's views stop (Ctrl-C) once ``after_pictures`` pictures are written."""
    write_views = generate_module.write_tensorboard

    def stopped(*args, **kwargs):
        monkeypatch.setattr(generate_module, "write_tensorboard", write_views)
        if after_pictures:
            write_views(*args, **{**kwargs, "max_samples": after_pictures})
        raise KeyboardInterrupt

    monkeypatch.setattr(generate_module, "write_tensorboard", stopped)


def test_resume_draws_the_views_a_stop_cut_short(run, tmp_path, monkeypatch, capsys):
    whole = tmp_path / "whole"
    assert main(_generate(run, whole)) == 0
    assert not (whole / "views.unfinished").exists()
    _stop_in_views(monkeypatch, after_pictures=1)
    stopped = tmp_path / "stopped"
    capsys.readouterr()
    assert main(_generate(run, stopped)) == 130
    said = capsys.readouterr().err
    assert (f"the predictions are in {stopped / 'predictions.jsonl'}, but the TensorBoard views of their history "
            f"were not finished; draw them with: xdllm generate resume={stopped}") in said
    assert (stopped / "predictions.jsonl").exists() and (stopped / "views.unfinished").exists()
    assert len(_image_tags(stopped)) < len(_image_tags(whole))  # cut short
    assert main(_generate(run, stopped)) == 2  # generating over it again is refused, naming the way on
    assert f"or draw the views a stop cut short with: xdllm generate resume={stopped}" in capsys.readouterr().err

    assert main(["generate", f"resume={stopped}"]) == 0
    captured = capsys.readouterr()
    assert f"drawing the TensorBoard views of {stopped} again: the stop cut them short" in captured.err
    printed = json.loads(captured.out[captured.out.index("{"):])
    assert printed == json.loads((stopped / "summary.json").read_text())
    assert printed["exact_match"] == json.loads((whole / "summary.json").read_text())["exact_match"]
    assert _image_tags(stopped) == _image_tags(whole)  # one event file, whole
    assert not (stopped / "views.unfinished").exists()
    assert main(["generate", f"resume={stopped}"]) == 2  # now finished
    assert "holds a finished generation (predictions.jsonl): there is nothing to continue" in capsys.readouterr().err


def test_a_generation_without_views_leaves_no_mark(run, tmp_path):
    folder = tmp_path / "plain"
    assert main(["generate", f"ckpt={run}", "num_samples=4", f"output_dir={folder}"]) == 0
    assert (folder / "predictions.jsonl").exists() and not (folder / "views.unfinished").exists()
