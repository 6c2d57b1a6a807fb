"""Paths Hydra reads only in quotes (``runs/copy (1)``, ``künstler``) work everywhere xdllm writes
them into an override, and every command xdllm prints can be pasted into a shell as it is."""

import shlex

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.config.override_text import (
    check_override_syntax,
    command,
    override,
    override_value,
    shell_word,
)
from xdllm.config.run_paths import quoted_paths
from xdllm.errors import XdllmError

AWKWARD_PATHS = ["/tmp/runs/copy (1)", "/tmp/künstler/run", "/tmp/a,b", "/tmp/it's", "/tmp/x=y", "/tmp/a~b#c",
                 "/tmp/two  spaces", '/tmp/say "hi"', "/tmp/back\\slash", "/tmp/[x]", "/tmp/end\\", "/tmp/q\\'x"]


def test_plain_values_are_written_as_they_are():
    assert override_value("/tmp/runs/sort-1.2/best.ckpt") == "/tmp/runs/sort-1.2/best.ckpt"
    assert override("ckpt", "runs/x") == "ckpt=runs/x"
    assert override_value(["/a", "/b c"]) == "[/a,'/b c']"
    assert override_value("/tmp/ä") == "'/tmp/ä'"  # a letter, but not one Hydra reads unquoted


@pytest.mark.parametrize("path", AWKWARD_PATHS)
def test_hydra_reads_back_the_path_an_override_was_written_with(path):
    parsed = OverridesParser.create().parse_override(override("ckpt", path))
    assert parsed.key_or_group == "ckpt" and parsed.value() == path


@pytest.mark.parametrize("path", AWKWARD_PATHS)
def test_a_shell_reads_back_the_words_of_a_printed_command(path):
    words = ["xdllm", "generate", override("ckpt", path), f"resume={path}", "predictor.temperature=1.0"]
    assert shlex.split(command(*words)) == words


def test_printed_commands_stay_readable():
    assert command("xdllm", "train", "resume=/tmp/runs/x") == "xdllm train resume=/tmp/runs/x"
    assert shell_word("ckpt='/tmp/copy (1)'") == "\"ckpt='/tmp/copy (1)'\""
    assert shell_word("mlm.target_length=${derived.max_new_tokens}") == "'mlm.target_length=${derived.max_new_tokens}'"


def test_an_override_hydra_cannot_read_is_one_line_with_its_quoted_form():
    with pytest.raises(XdllmError) as refused:
        check_override_syntax(["data.batch_size=8", "ckpt=/tmp/copy (1)"])
    assert str(refused.value) == (
        "override 'ckpt=/tmp/copy (1)' cannot be read (mismatched input ' (' expecting <EOF>); a value with characters "
        "other than ASCII letters, digits, spaces and / . _ - + : @ needs quotes: ckpt='/tmp/copy (1)' (from a shell: "
        "\"ckpt='/tmp/copy (1)'\")")
    with pytest.raises(XdllmError, match=r"^override 'data_path=d \(1\)' cannot be read \(HydraException while "
                                         r"evaluating 'd \(1\)': Unknown function 'd'\).* needs quotes: "
                                         r"data_path='d \(1\)'"):
        check_override_syntax(["data_path=d (1)"])
    with pytest.raises(XdllmError, match=r"^override 'oops' is not KEY=VALUE"):
        check_override_syntax(["oops"])
    check_override_syntax(["~trainer.max_time", "a=1,2", "ckpt='/tmp/copy (1)'", "x=${y}"])


def test_training_in_a_folder_hydra_reads_only_in_quotes_generates_after_it(tmp_path, capsys):
    """The generation after training passed the checkpoint to Hydra unquoted and failed."""
    run_dir = tmp_path / "runs (1)" / "künstler"
    overrides = [o for o in TINY if o != "generate_after_train=false"]
    assert main(["train", *overrides, "trainer.max_steps=2", "trainer.val_check_interval=2",
                 override("run_dir", run_dir)]) == 0, capsys.readouterr().err
    assert len((run_dir / "generate").iterdir().__next__().joinpath("predictions.jsonl").read_text().splitlines()) == 16
    assert main(["train", f"resume={run_dir}", "trainer.max_steps=3", "generate_after_train=false"]) == 0


def test_a_path_holding_equals_signs_is_quoted_for_hydra():
    """A training sweep names its runs by their settings (``optim.lr=0.001,seed=0``); given as
    ``ckpt=<sweep>/optim.lr=0.001,seed=0`` it was refused as an override Hydra cannot read."""
    run = "runs/lr/optim.lr=0.001,seed=0"
    assert quoted_paths([f"ckpt={run}", f"+frozen.target={run}", f"init_from={run}", "seed=1", "x=a=b",
                         f"ckpt='{run}'"]) == [f"ckpt='{run}'", f"+frozen.target='{run}'", f"init_from='{run}'",
                                              "seed=1", "x=a=b", f"ckpt='{run}'"]
    assert quoted_paths([f"task.params.path={run}", f"predictor.max_steps={run}"]) == [
        f"task.params.path='{run}'", f"predictor.max_steps={run}"]  # a task's path; no path key
    assert quoted_paths([f"collator.train.tokens_file={run}"]) == [f"collator.train.tokens_file='{run}'"]  # *_file
    check_override_syntax(quoted_paths([f"ckpt={run}"]))


def test_eval_of_a_run_in_a_sweep_folder_reads_its_path(tmp_path, capsys):
    assert main(["eval", f"ckpt={tmp_path}/sweep/optim.lr=0.001,seed=0"]) == 2
    error = capsys.readouterr().err
    assert "cannot be read" not in error
    assert f"{tmp_path}/sweep/optim.lr=0.001,seed=0" in error and "not found" in error
