"""``xdllm history show`` / ``tensorboard``: output, defaults and one-line errors."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys

import pytest
import torch

from xdllm.cli.history import add_history_parser, run_history_command
from xdllm.data.tokenizer import SymbolTokenizer
from xdllm.history import HistoryTopKPlugin, load_history

TOKENIZER = SymbolTokenizer(list("abcdefgh"))


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="xdllm")
    add_history_parser(parser.add_subparsers(dest="command"))
    return run_history_command(parser.parse_args(list(argv)))


@pytest.fixture
def run_dir(tmp_path, generate):
    recorder = HistoryTopKPlugin(k=3, output_dir=tmp_path / "history", tokenizer=TOKENIZER)
    generate(recorder, prompt_lens=[2, 3], gen_len=4, commits_per_step=[1, 2], seed=1)
    generate(recorder, prompt_lens=[2], gen_len=3, commits_per_step=[3], seed=2)
    return tmp_path


def test_show_replays_one_sample(run_dir, capsys):
    assert _run("history", "show", str(run_dir / "history" / "history-00000.pt"),
                "--sample", "1", "--k", "2", "--color", "never") == 0
    out = capsys.readouterr().out
    sample = load_history(run_dir / "history" / "history-00000.pt").sample(1)  # 4 positions, 2 steps
    name = TOKENIZER.id_to_token
    using, *lines = out.splitlines()
    assert using == f"using {run_dir / 'history' / 'history-00000.pt'}"
    assert lines[0] == ("sample 1: 2 steps (0..1) = 2 forward passes; output starts at canvas position 3 "
                        "(positions below count from it); top-3 recorded")
    assert lines[1] == "prompt: " + " ".join(name(i) for i in sample.prompt_ids.tolist())
    assert lines[2] == "target: " + " ".join(name(i) for i in sample.target_ids.tolist())
    assert lines[3] == "output: row 1"
    final_wrong = sample.wrong[-1].tolist()
    assert lines[4].startswith(f"result: {4 - sum(final_wrong)} of 4 target tokens right")
    wrong = sample.wrong[0].tolist()
    first = lines.index(f"step 0 (1 of 2): 2 committed, 2 masked, {sum(wrong)} wrong")
    assert lines[first + 1] == "  " + " ".join(
        f"*{name(t)}{'✗' if w else ''}*" if c else "_"
        for t, c, w in zip(sample.canvas[0].tolist(), sample.committed[0].tolist(), wrong))
    for j in range(4):  # every position: the two committed and the two still masked
        ids, probs = sample.topk_ids[0, j, :2].tolist(), sample.topk_probs[0, j, :2].tolist()
        alternatives = f"{name(ids[0])} {probs[0]:.3f}  {name(ids[1])} {probs[1]:.3f}"
        if sample.committed[0, j]:
            token = name(int(sample.canvas[0, j])) + ("✗" if wrong[j] else "")
            what = f"{token} committed, conf {float(sample.confidence_at_commit[j]):.3f}"
        else:
            what = "_ masked"
        assert lines[first + 2 + j] == f"  {j} {what}: {alternatives}"


def test_show_caps_masked_positions(run_dir, capsys):
    assert _run("history", "show", str(run_dir / "history" / "history-00000.pt"),
                "--positions", "1", "--step", "0") == 0
    lines = capsys.readouterr().out.splitlines()
    first = next(n for n, line in enumerate(lines) if line.startswith("step 0 "))
    listed = [line for line in lines[first + 2:] if not line.startswith("  ...")]
    assert len(listed) == 2  # the committed position and the first masked one
    assert lines[-1] == "  ... 3 more masked positions (--positions to show more)"


def test_show_run_dir_counts_across_files_and_filters_step(run_dir, capsys):
    assert _run("history", "show", str(run_dir), "--sample", "2", "--step", "0",
                "--color", "always") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"using {run_dir / 'history'} (the only history folder under {run_dir})\n"
                          "sample 2: 1 step (0)")
    assert "\033[1;3" in out and "step 0 (1 of 1): 3 committed, 0 masked" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "{run}/missing.pt"], "missing.pt: no such file or directory"),
        (["show", "{run}", "--sample", "3"], "sample 3 out of range (3 samples recorded in 2 files)"),
        (["show", "{run}", "--step", "7"], "sample 0 has no step 7 (steps: 0..4)"),
        (["show", "{run}", "--k", "4"], "k=4 out of range: this history stores top-3"),
        (["show", "{run}/history/history-00000.pt"], None),
        (["tensorboard", "{run}/history/history-00000.pt", "--logdir", "{run}/tb"], None),
    ],
)
def test_errors_are_one_line(run_dir, capsys, argv, message):
    argv = [a.replace("{run}", str(run_dir)) for a in argv]
    if message is None:  # truncate the file first
        path = run_dir / "history" / "history-00000.pt"
        path.write_bytes(path.read_bytes()[:200])
        message = ("history-00000.pt: cannot be read as a history file (cut short: 200 bytes of a torch zip "
                   "archive without its end)")
    assert _run("history", *argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("xdllm history: error: ") and message in err


def test_a_file_that_is_no_torch_archive_is_named_as_not_a_history_file(tmp_path, capsys):
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text('{"sample_index": 0}\n')
    assert _run("history", "show", str(predictions)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("predictions.jsonl: cannot be read as a history file (not a torch file: 20 bytes, "
                                     "not a torch zip archive); history files are the history-NNNNN.pt"
                                     in err)


def test_an_empty_file_is_named_as_empty(tmp_path, capsys):
    empty = tmp_path / "history-00000.pt"
    empty.write_bytes(b"")
    assert _run("history", "show", str(empty)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"xdllm history: error: {empty}: cannot be read as a history file (an empty file, 0 bytes);")


@pytest.mark.parametrize("command", [["show"], ["play", "--delay", "0"], ["revisions"]])
def test_a_closed_stdout_ends_quietly_with_141(run_dir, command):
    """``xdllm history ... | head -1``: the reader is gone before the command writes."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-c", "import sys; from xdllm.cli.main import main; "
                               "sys.exit(main(sys.argv[1:]))", "history", *command[:1], str(run_dir),
                               *command[1:]], stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=120, check=False)
    finally:
        os.close(write)
    assert done.returncode == 141
    assert "error" not in done.stderr.lower()  # revisions names its folder on stderr, nothing more


def test_the_lines_on_stdout_and_stderr_keep_their_order_in_one_pipe(run_dir):
    """``xdllm history show <run> --k 10 2>&1 | cat`` printed the error before the 'using' line
    written first: stdout waited in its buffer until the exit."""
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-c", "import sys; from xdllm.cli.main import main; "
                           "sys.exit(main(sys.argv[1:]))", "history", "show", str(run_dir), "--k", "10"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False,
                          env=buffered)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith("using ") and lines[1].startswith("xdllm history: error: k=10 out of range"), lines


def test_a_logdir_that_cannot_be_made_is_named(run_dir, capsys):
    """It was ``[Errno 20] Not a directory: '...'``, naming neither the views nor --logdir."""
    (run_dir / "file").write_text("")
    assert _run("history", "tensorboard", str(run_dir), "--logdir", str(run_dir / "file" / "tb")) == 1
    assert capsys.readouterr().err == (f"xdllm history: error: cannot write the views to {run_dir / 'file' / 'tb'}: "
                                       "Not a directory\n")
    (run_dir / "tensorboard").write_text("")  # where the views go by default
    assert _run("history", "tensorboard", str(run_dir)) == 1
    assert capsys.readouterr().err.endswith(": Not a directory (--logdir DIR writes them elsewhere)\n")


def test_no_sample_views_still_write_the_statistics_of_every_sample(run_dir, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert _run("history", "tensorboard", str(run_dir), "--max-samples", "0") == 0
    logdir = run_dir / "tensorboard" / "history"
    assert f"wrote 0 of 3 samples to {logdir} (--max-samples; the statistics count all 3)" in capsys.readouterr().out
    events = EventAccumulator(str(logdir), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    assert not events.Tags()["tensors"] and not events.Tags()["images"]  # no text cards, no pictures
    passes = [tag for tag in events.Tags()["scalars"] if tag.endswith("/forward_passes_per_sample")]
    assert len(passes) == 1 and len(events.Scalars(passes[0])) == 3


def test_tensorboard_default_logdir(run_dir, capsys):
    assert _run("history", "tensorboard", str(run_dir), "--max-samples", "2", "--max-frames", "1") == 0
    logdir = run_dir / "tensorboard" / "history"
    out = capsys.readouterr().out
    assert f"wrote 2 of 3 samples to {logdir} (--max-samples; the statistics count all 3)" in out
    assert f"view: tensorboard --logdir {logdir} --samples_per_plugin=images=1000" in out
    assert any(p.name.startswith("events.out.tfevents") for p in logdir.iterdir())


def test_the_view_command_is_quoted_for_the_shell(run_dir, tmp_path, capsys):
    logdir = tmp_path / "views (1)"
    assert _run("history", "tensorboard", str(run_dir), "--logdir", str(logdir), "--max-samples", "1",
                "--max-frames", "1") == 0
    (view,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("view: ")]
    assert shlex.split(view.removeprefix("view: "))[:3] == ["tensorboard", "--logdir", str(logdir)]


def test_tensorboard_rerun_replaces_its_event_files_and_nothing_else(run_dir, capsys):
    logdir = run_dir / "tensorboard" / "history"
    (logdir / "other").mkdir(parents=True)
    kept = [logdir / "notes.txt", logdir / "events.out.tfevents.1.host",  # e.g. training's metrics
            logdir / "other" / "events.out.tfevents.1.host.history"]
    for path in kept:
        path.write_text("keep")
    argv = ("history", "tensorboard", str(run_dir), "--max-samples", "1", "--max-frames", "1")
    assert _run(*argv) == 0
    assert "removed" not in capsys.readouterr().out
    assert _run(*argv) == 0
    assert f"replacing the views written before: removed 1 history event file in {logdir}" in capsys.readouterr().out
    assert len(list(logdir.glob("events.out.tfevents.*.history"))) == 1
    assert all(path.read_text() == "keep" for path in kept)


def test_tensorboard_outside_a_run_needs_logdir(tmp_path, generate, capsys):
    recorder = HistoryTopKPlugin(k=2, output_dir=tmp_path / "loose")
    generate(recorder, prompt_lens=[1], gen_len=2, commits_per_step=[1])
    assert _run("history", "tensorboard", str(recorder.files_written[0])) == 1
    assert "not inside a run directory" in capsys.readouterr().err


def test_tensorboard_of_a_file_that_is_no_history_outside_a_run_names_what_the_file_is(tmp_path, capsys):
    """It said 'not inside a run directory; pass --logdir', and with --logdir 'skipped' the file."""
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    checkpoint.parent.mkdir(parents=True)
    torch.save({"state_dict": {}, "global_step": 3}, checkpoint)
    assert _run("history", "tensorboard", str(checkpoint)) == 1
    err = capsys.readouterr().err
    assert f"{checkpoint.resolve()}: a training checkpoint, not a denoising-history file" in err
    assert "pass --logdir" not in err


def test_tensorboard_writes_every_valid_file_and_names_every_bad_one(tmp_path, generate, capsys):
    recorder = HistoryTopKPlugin(k=3, output_dir=tmp_path / "history", tokenizer=TOKENIZER)
    for seed in range(4):  # four files, one sample each
        generate(recorder, prompt_lens=[2], gen_len=3, commits_per_step=[3], seed=seed)
    for bad in ("history-00001.pt", "history-00002.pt"):
        (tmp_path / "history" / bad).write_bytes(b"garbled")
    assert _run("history", "tensorboard", str(tmp_path), "--logdir", str(tmp_path / "tb"),
                "--max-frames", "1") == 1
    captured = capsys.readouterr()
    assert "wrote 2 samples" in captured.out  # files 0 and 3: the one after the bad ones too
    errors = captured.err.strip().splitlines()
    assert len(errors) == 2 and all(line.startswith("xdllm history: error: skipped ") for line in errors)
    assert "history-00001.pt" in errors[0] and "history-00002.pt" in errors[1]


@pytest.fixture
def two_generations(tmp_path, generate):
    """A run with a validation history (older) and a generation's history (newer)."""
    run = tmp_path / "run"
    validation = HistoryTopKPlugin(k=2, output_dir=run / "history" / "val-step0000002",
                                   tokenizer=TOKENIZER, split="validation")
    generate(validation, prompt_lens=[2], gen_len=2, commits_per_step=[2], seed=1)
    test = HistoryTopKPlugin(k=2, output_dir=run / "generate" / "20260101-120000" / "history",
                             tokenizer=TOKENIZER, split="test")
    generate(test, prompt_lens=[2, 2], gen_len=3, commits_per_step=[3, 3], seed=2)
    os.utime(validation.files_written[0], (1_000_000, 1_000_000))
    os.utime(test.files_written[0], (2_000_000, 2_000_000))
    return run, validation.files_written[0].parent, test.files_written[0].parent


def test_a_run_directory_stands_for_its_newest_generation(two_generations, capsys):
    run, validation, test = two_generations
    assert _run("history", "show", str(run), "--sample", "1") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"using {test} (newest of 2 history folders under {run}; --all for every one)"
    assert out[1].startswith("sample 1: 1 step")
    # --all: samples counted over both folders, oldest first (validation sample 0, then test 0, 1)
    assert _run("history", "show", str(run), "--all", "--sample", "2") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"using {validation} (2 history folders under {run})",
                       f"using {test} (2 history folders under {run})"]
    assert out[2].startswith("sample 1: 1 step")


def test_play_resolves_a_folder_as_show_does(two_generations, capsys):
    run, validation, test = two_generations
    assert _run("history", "play", str(run), "--sample", "1", "--delay", "0") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"using {test} (newest of 2 history folders under {run}; --all for every one)"
    assert out[-1] == "output: row 1"  # the newest generation's second sample
    assert _run("history", "play", str(run), "--sample", "2") == 1
    assert "sample 2 out of range (2 samples recorded in 1 file)" in capsys.readouterr().err
    assert _run("history", "play", str(run), "--all", "--sample", "1", "--delay", "0") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"using {validation} (2 history folders under {run})",
                       f"using {test} (2 history folders under {run})"]
    assert out[-1] == "output: row 0"  # counted over both folders: the newest one's first sample


def test_several_files_are_read_in_order(two_generations, capsys):
    _, validation, test = two_generations
    files = [str(test / "history-00000.pt"), str(validation / "history-00000.pt")]
    assert _run("history", "show", *files, "--sample", "2", "--color", "never") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"using {files[0]}", f"using {files[1]}"]
    assert out[2].startswith("sample 0: 1 step")  # the validation file's only sample


def test_tensorboard_newest_by_default_every_folder_with_all(two_generations, capsys):
    run, validation, test = two_generations
    assert _run("history", "tensorboard", str(run), "--max-frames", "1") == 0
    out = capsys.readouterr().out
    assert f"using {test} (newest of 2 history folders under {run}; --all for every one)" in out
    logdir = test.parent / "tensorboard" / "history"  # the generation folder's own
    assert f"wrote 2 samples to {logdir}" in out
    assert (test / "history-00000.sample_00001.png").is_file()
    assert not list(validation.glob("*.png"))

    assert _run("history", "tensorboard", str(run), "--all", "--max-frames", "1",
                "--logdir", str(run / "tb")) == 0
    out = capsys.readouterr().out
    assert f"wrote 1 samples to {run / 'tb' / 'val-step0000002'}" in out
    assert f"wrote 2 samples to {run / 'tb' / '20260101-120000'}" in out
    assert f"view: tensorboard --logdir {run / 'tb'} --samples_per_plugin=images=1000" in out


def test_history_help_is_plain_text(capsys):
    parser = argparse.ArgumentParser(prog="xdllm")
    add_history_parser(parser.add_subparsers(dest="command"))
    for argv in (["history", "--help"], ["history", "show", "--help"], ["history", "tensorboard", "--help"]):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        text = capsys.readouterr().out
        assert "``" not in text and ":func:" not in text and ":class:" not in text
    with pytest.raises(SystemExit):
        parser.parse_args(["history", "--help"])
    assert "newest generation" in capsys.readouterr().out


def test_history_help_summary_matches_each_subcommand():
    """Each command line of ``xdllm history --help`` names exactly the subcommand's options,
    and one PATH or several as the subcommand takes."""
    from xdllm.cli.history import DESCRIPTION

    parser = argparse.ArgumentParser(prog="xdllm")
    history = add_history_parser(parser.add_subparsers(dest="command"))
    (commands,) = [a for a in history._actions if isinstance(a, argparse._SubParsersAction)]
    summary = re.findall(r"^  xdllm history (\w+) (.*(?:\n {10}.*)*)", DESCRIPTION, re.MULTILINE)
    assert [name for name, _ in summary] == list(commands.choices)
    for name, usage in summary:
        sub = commands.choices[name]
        options = {o for a in sub._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
        assert set(re.findall(r"--[\w-]+", usage)) == options, name
        (paths,) = [a for a in sub._actions if not a.option_strings]
        assert ("PATH..." in usage) == (paths.nargs == "+"), name
