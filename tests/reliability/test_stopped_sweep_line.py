"""A sweep stopped after its last generation finished but before that generation's line reached
``sweep.jsonl``: ``resume=`` writes the line from the generation's ``summary.json`` instead of
saying that the sweep has nothing to continue."""

import json
from pathlib import Path

from xdllm.cli.main import main
from xdllm.run import sweep as sweep_module


def _sweep(run: Path, folder: Path) -> list[str]:
    return ["generate", "-m", f"ckpt={run}", "predictor.max_steps=5,3", "num_samples=4", "batch_size=2",
            f"output_dir={folder}"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_resume_lists_a_finished_generation_the_stop_left_out(run, tmp_path, monkeypatch, capsys):
    assert main(_sweep(run, tmp_path / "whole")) == 0
    write = sweep_module.write_jsonl_atomically

    def stopped_at_the_last_line(path, lines, *args, **kwargs):
        if len(lines) == 2:
            monkeypatch.setattr(sweep_module, "write_jsonl_atomically", write)
            raise KeyboardInterrupt
        return write(path, lines, *args, **kwargs)

    monkeypatch.setattr(sweep_module, "write_jsonl_atomically", stopped_at_the_last_line)
    stopped = tmp_path / "stopped"
    assert main(_sweep(run, stopped)) == 130
    assert len(_lines(stopped / "sweep.jsonl")) == 1 and (stopped / "max_steps=3" / "summary.json").exists()
    capsys.readouterr()
    assert main(["generate", f"resume={stopped}"]) == 0
    assert f"continuing the sweep in {stopped}: 2 of 2 generations finished" in capsys.readouterr().err
    kept = [(line["folder"], line["settings"], line["exact_match"]) for line in _lines(stopped / "sweep.jsonl")]
    assert kept == [(line["folder"], line["settings"], line["exact_match"])
                    for line in _lines(tmp_path / "whole" / "sweep.jsonl")]
    assert main(["generate", f"resume={stopped}"]) == 2
    assert f"the sweep in {stopped} has finished all 2 generations" in capsys.readouterr().err
