"""What `xdllm generate` / `xdllm eval` refuse, each with one line, before anything is written."""

import json

import pytest
from test_tokenizer_train import corpus_lines
from tiny_run import TINY

from xdllm.cli.main import main
from xdllm.config.compose import compose_config


def _error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("option", ["output_dir={out}", "history=topk", "live=true", "history_k=3"])
def test_eval_refuses_what_only_generate_writes_or_draws(trained_run, tmp_path, capsys, option):
    out = tmp_path / "evout"
    override = option.format(out=out)
    assert main(["eval", f"ckpt={trained_run}", override]) == 2
    assert _error(capsys).startswith(f"xdllm: error: eval writes nothing, so {override} does not apply to it; "
                                     "use xdllm generate")
    assert not out.exists()


@pytest.mark.parametrize(("command", "split", "count_key"), [("generate", "test", "num_test_samples"),
                                                            ("eval", "validation", "num_val_samples")])
def test_num_samples_past_the_held_out_samples_is_refused(trained_run, tmp_path, capsys, command, split, count_key):
    # TINY holds out 16 samples of each split; sample 17 on may have been trained on
    out = ["output_dir=" + str(tmp_path / "out")] if command == "generate" else []
    assert main([command, f"ckpt={trained_run}", f"split={split}", "num_samples=17", *out]) == 2
    assert _error(capsys) == (f"xdllm: error: num_samples=17 is more than the run's 16 held-out {split} samples "
                              f"(data.{count_key}=16); later samples were not kept out of training: set "
                              "num_samples to at most 16")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["generate", "eval"])
def test_num_samples_takes_the_first_prompts_of_a_prompts_file(trained_run, tmp_path, capsys, command):
    """It was ignored: every prompt of the file was generated and scored."""
    prompts = tmp_path / "pairs.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": prompt, "response": " ".join(sorted(prompt.split()))}) + "\n"
                               for prompt in ["3 1 2 4", "4 4 1 2", "9 8 7 6"]))
    out = [f"output_dir={tmp_path / 'out'}"] if command == "generate" else []
    assert main([command, f"ckpt={trained_run}", f"prompts_file={prompts}", "num_samples=2", *out]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed[printed.index("{"):])["num_samples"] == 2
    if command == "generate":
        assert [json.loads(line)["prompt"] for line in open(tmp_path / "out" / "predictions.jsonl")] == [
            "3 1 2 4", "4 4 1 2"]
    assert main([command, f"ckpt={trained_run}", f"prompts_file={prompts}", "num_samples=4"]) == 2
    assert _error(capsys) == (f"xdllm: error: num_samples=4 is more than the 3 prompts of prompts_file {prompts}: "
                              "give num_samples=3 or less, or leave it out (every prompt)")


def test_a_bad_predictor_value_reads_as_at_training_time(trained_run, tmp_path, capsys):
    assert main(["generate", f"ckpt={trained_run}", "predictor.threshold=abc"]) == 2
    at_generation = _error(capsys)
    assert main(["train", *TINY, "predictor.threshold=abc", f"run_dir={tmp_path / 'run'}"]) == 2
    assert at_generation == _error(capsys) == ("xdllm: error: predictor.threshold='abc' is not allowed: "
                                               "predictor.threshold must be a number (or null)")


@pytest.mark.parametrize(("swept", "refused"), [
    ("predictor.threshold=0.5,abc", "predictor.threshold='abc' is not allowed"),
    ("predictor.max_steps=2,0", "could not build predictor (xdllm_models.mlm.predictor.MLMPredictor): max_steps "
                                "must be >= 1, got 0"),
    ("num_samples=2,17", "num_samples=17 is more than the run's 16 held-out test samples"),
])
def test_a_sweep_refuses_a_bad_combination_before_the_first_runs(trained_run, tmp_path, capsys, swept, refused):
    out = tmp_path / "sweep"
    assert main(["generate", "-m", f"ckpt={trained_run}", "batch_size=2", swept, f"output_dir={out}"]) == 2
    assert _error(capsys).startswith(f"xdllm: error: {refused}")
    assert not out.exists()  # not even the first, good, combination ran


def test_cfg_shows_the_predictor_resolved_over_the_runs_own(trained_run):
    from xdllm.run.generate import config_to_print

    printed = config_to_print(compose_config("generate", [f"ckpt={trained_run}", "predictor.threshold=0.9"]))
    assert printed.predictor_overrides == {"threshold": 0.9}
    assert printed.predictor.threshold == 0.9
    assert printed.predictor._target_ == "xdllm_models.mlm.predictor.MLMPredictor"
    assert printed.predictor.max_new_tokens == 5  # the run's own: 4 digits + eos
    unreadable = compose_config("generate", ["ckpt=/no/such/run", "predictor.threshold=0.9"])
    assert config_to_print(unreadable) == unreadable  # nothing to resolve against: printed as composed


def test_an_unknown_key_names_every_key_generate_has(trained_run, capsys):
    assert main(["generate", f"ckpt={trained_run}", "+bogus=1"]) == 2
    assert _error(capsys).endswith("known keys there: batch_size, choice_records, ckpt, data_path, device, ema, "
                                   "evaluator, frozen, history, history_k, history_tensorboard_samples, judge, live, "
                                   "num_samples, output_dir, predictor, prompts_file, split")


def test_an_output_dir_that_is_a_file_is_refused(trained_run, tmp_path, capsys):
    a_file = tmp_path / "afile"
    a_file.write_text("mine")
    assert main(["generate", f"ckpt={trained_run}", "num_samples=1", f"output_dir={a_file}"]) == 2
    assert _error(capsys) == f"xdllm: error: output_dir {a_file} is a file, not a folder; choose another output_dir"
    assert main(["generate", f"ckpt={trained_run}", "num_samples=1", f"output_dir={a_file / 'sub'}"]) == 2
    assert _error(capsys) == (f"xdllm: error: {a_file}, a parent of output_dir {a_file / 'sub'}, is a file, "
                              "not a folder; choose another output_dir")
    assert a_file.read_text() == "mine"


@pytest.mark.slow
def test_free_text_samples_may_outnumber_the_held_out_documents_but_their_loss_may_not(tmp_path, capsys):
    # free-text prompts are empty and nothing is scored against their documents; a loss is
    # computed on them
    (tmp_path / "corpus.txt").write_text("\n".join(corpus_lines()) + "\n")
    tokenizer = tmp_path / "tokenizer.json"
    assert main(["tokenizer", "train", str(tmp_path / "corpus.txt"), "-o", str(tokenizer), "--vocab-size", "300"]) == 0
    run_dir = tmp_path / "run"
    assert main(["train", "task=text_file", f"task.params.path={tmp_path / 'corpus.txt'}", f"tokenizer={tokenizer}",
                 "model=mdlm", "task.params.max_tokens=16", "model.d_model=32", "model.n_layers=1",
                 "model.n_heads=2", "trainer.max_steps=2", "trainer.val_check_interval=2", "data.batch_size=4",
                 "data.num_val_samples=4", "data.num_test_samples=4", "history.num_samples=0", "torch_threads=1",
                 "optim.warmup_steps=1", "text_samples_after_train=6", f"run_dir={run_dir}"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{"):])["text_samples"] == 6
    assert main(["eval", f"ckpt={run_dir}", "num_samples=6"]) == 2
    assert "num_samples=6 is more than the run's 4 held-out test samples" in _error(capsys)


def test_of_two_generations_into_one_output_dir_started_at_once_one_is_refused(trained_run, tmp_path, monkeypatch,
                                                                                 capsys):
    out = tmp_path / "shared"
    assert main(["generate", f"ckpt={trained_run}", "num_samples=2", f"output_dir={out}"]) == 0
    written = (out / "predictions.jsonl").read_text()
    # the second checked the folder before the first had written anything (as when both start at once)
    monkeypatch.setattr("xdllm.run.generation_folder.generation_content_in", lambda folder: [])
    assert main(["generate", f"ckpt={trained_run}", "num_samples=1", f"output_dir={out}"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"xdllm: error: output_dir {out} already holds generate.yaml;")
    assert (out / "predictions.jsonl").read_text() == written


def test_a_generation_killed_as_it_claimed_its_folder_is_said_so_on_resume(tmp_path, capsys):
    claimed = tmp_path / "claimed"
    claimed.mkdir()
    (claimed / "generate.yaml").touch()  # what a generation killed between its claim and its first write leaves
    assert main(["generate", f"resume={claimed}"]) == 2
    assert _error(capsys) == (f"xdllm: error: {claimed / 'generate.yaml'} is empty: the generation that claimed "
                              f"{claimed} was stopped before it wrote anything; there is nothing to continue: move "
                              f"{claimed} away and start a new one")


@pytest.mark.parametrize("command", ["generate", "eval"])
def test_a_canvas_shorter_than_the_splits_targets_is_refused(trained_run, tmp_path, capsys, command):
    out = ["output_dir=" + str(tmp_path / "out")] if command == "generate" else []
    assert main([command, f"ckpt={trained_run}", "predictor.max_new_tokens=3", *out]) == 2
    assert _error(capsys) == ("xdllm: error: the test split's targets are up to 5 tokens with their EOS (task sort), "
                              "more than the 3 the predictor generates (predictor.max_new_tokens=3): those longer "
                              "could not match; give predictor.max_new_tokens=5 or more, or leave it out (the run's "
                              "own)")
    assert not (tmp_path / "out").exists()
