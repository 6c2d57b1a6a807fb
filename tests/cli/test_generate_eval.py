"""`xdllm generate` and `xdllm eval` on a briefly trained run."""

import json
import logging

import pytest
from held_out_draw_counter import count_held_out_draws

from xdllm.cli.main import main
from xdllm.run.generation_progress import GenerationProgress


def test_training_ends_by_generating_on_the_test_split(trained_run):
    (predictions,) = trained_run.glob("generate/*/predictions.jsonl")
    assert len(predictions.read_text().splitlines()) == 16  # data.num_test_samples in TINY
    assert list(predictions.parent.glob("history/history-*.pt"))


def _summary(capsys) -> dict:
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


@pytest.mark.slow
def test_generate_on_the_test_split_writes_predictions_and_history(trained_run, tmp_path, capsys):
    out_dir = tmp_path / "gen"
    assert main(["generate", f"ckpt={trained_run}", "history=topk", "num_samples=10",
                 "batch_size=4", f"output_dir={out_dir}"]) == 0
    summary = _summary(capsys)
    assert summary["num_samples"] == 10 and 0.0 <= summary["exact_match"] <= 1.0
    records = [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 10
    assert sorted(r["sample_index"] for r in records) == list(range(10))
    assert {"prompt", "text", "target", "ids", "steps_taken", "time_taken", "exact_match"} <= set(records[0])
    assert all(r["steps_taken"] == 5 for r in records)  # 4 digits + eos, one token per step
    assert len(list((out_dir / "history").glob("history-*.pt"))) == 3  # batches of 4, 4, 2
    assert list((out_dir / "tensorboard").rglob("events.out.tfevents.*"))


@pytest.mark.slow
def test_generate_from_a_prompts_file_with_predictor_overrides(trained_run, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("3 1 2 0\n\n9 9 1 5\n")
    out_dir = tmp_path / "gen"
    assert main(["generate", f"ckpt={trained_run}", f"prompts_file={prompts}",
                 "predictor.max_steps=2", "predictor.confidence=entropy",
                 f"output_dir={out_dir}"]) == 0
    printed = capsys.readouterr()
    assert f"prompts_file {prompts}: 2 prompts; 1 blank line skipped\n" in printed.err  # not silently
    summary = json.loads(printed.out[printed.out.index("{"):])
    assert summary["num_samples"] == 2 and summary["mean_steps"] == 2
    assert "exact_match" not in summary
    records = [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in records] == ["3 1 2 0", "9 9 1 5"]
    assert all("target" not in r for r in records)


def test_a_jsonl_prompts_file_with_responses_is_scored_as_a_split_is(trained_run, tmp_path, capsys):
    (test_predictions,) = trained_run.glob("generate/*/predictions.jsonl")
    held_out = [json.loads(line) for line in test_predictions.read_text().splitlines()][:6]
    prompts = tmp_path / "benchmark.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": r["prompt"], "response": r["target"], "id": n}) + "\n"
                               for n, r in enumerate(held_out)))
    assert main(["generate", f"ckpt={trained_run}", f"prompts_file={prompts}", "batch_size=4",
                 f"output_dir={tmp_path / 'gen'}"]) == 0
    summary = _summary(capsys)
    records = [json.loads(line) for line in (tmp_path / "gen" / "predictions.jsonl").read_text().splitlines()]
    assert [(r["prompt"], r["target"], r["text"], r["exact_match"]) for r in records] == [
        (r["prompt"], r["target"], r["text"], r["exact_match"]) for r in held_out]  # as on the test split
    assert summary["exact_match"] == sum(r["exact_match"] for r in held_out) / 6
    assert summary["checkpoint"].startswith("/")

    timeless = ("tokens_per_second", "prompts_file", "split")
    assert main(["eval", f"ckpt={trained_run}", f"prompts_file={prompts}", "batch_size=4"]) == 0
    on_file = {key: value for key, value in _summary(capsys).items() if key not in timeless}
    assert main(["eval", f"ckpt={trained_run}", "num_samples=6", "batch_size=4"]) == 0
    on_split = {key: value for key, value in _summary(capsys).items() if key not in timeless}
    numbers = [key for key, value in on_split.items() if isinstance(value, float)]
    assert {key: on_file[key] for key in numbers} == pytest.approx({key: on_split[key] for key in numbers}, rel=1e-6)
    assert "loss" in numbers and on_file.keys() == on_split.keys()  # the loss too: the same corruption per sample

    prompts.write_text("".join(json.dumps({"prompt": r["prompt"]}) + "\n" for r in held_out))  # prompts alone
    assert main(["generate", f"ckpt={trained_run}", f"prompts_file={prompts}", f"output_dir={tmp_path / 'bare'}"]) == 0
    assert "exact_match" not in _summary(capsys)
    assert main(["eval", f"ckpt={trained_run}", f"prompts_file={prompts}"]) == 2
    assert "has prompts alone: give a .jsonl prompts_file with" in capsys.readouterr().err


@pytest.mark.slow
def test_infilling_from_a_prompts_file_fills_only_the_masks(trained_run, tmp_path, capsys):
    prompts = tmp_path / "infill.txt"
    prompts.write_text("3 <mask> 2 0 0 <mask> 2 3\n")
    out_dir = tmp_path / "gen"
    assert main(["generate", f"ckpt={trained_run}", f"prompts_file={prompts}",
                 "predictor.max_new_tokens=0", f"output_dir={out_dir}"]) == 0
    assert _summary(capsys)["mean_steps"] == 2  # two masks, one per step
    (record,) = [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]
    assert record["prompt"] == "<bos> 3 <mask> 2 0 0 <mask> 2 3"
    filled = record["ids"]  # the canvas from the first mask on
    assert filled[1:4] == [6, 4, 4] and filled[5:] == [6, 7]  # the given tokens are kept
    assert 1 not in filled  # no mask left (digit d has id d + 4, mask is 1)


def test_masks_in_prompts_to_continue_are_refused_naming_the_line_and_the_option(trained_run, tmp_path, capsys):
    prompts = tmp_path / "infill.txt"
    prompts.write_text("3 1 2 0\n3 <mask> 2 0\n<mask> 1\n")
    assert main(["generate", f"ckpt={trained_run}", f"prompts_file={prompts}"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"xdllm: error: {prompts}:2 (and 1 more prompts): the prompt holds mask tokens (<mask>), which a continuation "
        "(the predictor's max_new_tokens=5) does not fill; to fill them instead, give predictor.max_new_tokens=0 "
        "(infilling, where the family's predictor infills: mlm and mdlm do)")


def test_prompt_with_an_unknown_symbol_names_file_and_line(trained_run, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("1 2\n1 Q\n")
    assert main(["generate", f"ckpt={trained_run}", f"prompts_file={prompts}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("xdllm: error: ") and f"{prompts}:2" in err and "Q" in err


def test_unknown_predictor_option_is_one_line(trained_run, capsys):
    assert main(["generate", f"ckpt={trained_run}", "+predictor.no_such_option=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["xdllm: error: predictor.no_such_option: xdllm_models.mlm.predictor.MLMPredictor takes no "
                   "argument 'no_such_option'; it takes: max_steps, max_new_tokens, model, noise_schedule, top_k, "
                   "top_p, confidence, threshold, skip_special_tokens, temperature, block_size, stop_at_eos, remask, "
                   "prefix_cache, prefix_cache_refresh, dual_cache, guidance, entropy_budget, seed"]


@pytest.mark.slow
def test_eval_reports_loss_and_generation_metrics(trained_run, capsys):
    assert main(["eval", f"ckpt={trained_run}", "split=validation", "num_samples=8"]) == 0
    summary = _summary(capsys)
    assert summary["split"] == "validation" and summary["num_samples"] == 8
    assert summary["loss"] > 0 and "predictions" not in summary
    assert 0.0 <= summary["token_accuracy"] <= 1.0


def test_the_mlm_loss_on_a_split_does_not_depend_on_the_batch_split(trained_run, capsys):
    losses = []
    for batch_size in (16, 5, 3):  # 16 validation samples: one batch, or batches of 5, 5, 5, 1
        assert main(["eval", f"ckpt={trained_run}", "split=validation", f"batch_size={batch_size}"]) == 0
        losses.append(_summary(capsys)["loss"])
    assert losses[1] == pytest.approx(losses[0], rel=1e-6) and losses[2] == pytest.approx(losses[0], rel=1e-6)


def test_eval_draws_its_split_once_for_the_loss_and_the_generation(trained_run, capsys, monkeypatch):
    drawn = count_held_out_draws(monkeypatch)
    assert main(["eval", f"ckpt={trained_run}", "num_samples=4"]) == 0
    summary = _summary(capsys)
    assert summary["num_samples"] == 4 and summary["loss"] > 0
    assert drawn == [("test", 4)]


def test_eval_refuses_a_bad_predictor_option_before_the_loss_pass(trained_run, capsys, monkeypatch):
    drawn = count_held_out_draws(monkeypatch)
    assert main(["eval", f"ckpt={trained_run}", "num_samples=4", "predictor.max_steps=0"]) == 2
    assert "max_steps must be >= 1" in capsys.readouterr().err
    assert drawn == []


def test_a_predictor_option_refused_at_generation_time_is_one_line(trained_run, tmp_path, capsys):
    # the step budget is checked against the blocks of the actual prompts, inside predict()
    assert main(["generate", f"ckpt={trained_run}", "num_samples=4", "predictor.block_size=2",
                 "predictor.max_steps=2", f"output_dir={tmp_path / 'out'}"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and error.startswith("xdllm: error: MLMPredictor: max_steps=2 is smaller")
    assert not (tmp_path / "out").exists()  # the refused generation leaves no folder behind


def test_a_refused_generation_removes_only_what_it_made(trained_run, tmp_path, capsys):
    refused = ["num_samples=4", "predictor.block_size=2", "predictor.max_steps=2"]
    before = set((trained_run / "generate").iterdir())
    assert main(["generate", f"ckpt={trained_run}", *refused]) == 2  # an auto-named folder
    assert set((trained_run / "generate").iterdir()) == before
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    assert main(["generate", f"ckpt={trained_run}", *refused, f"output_dir={kept / 'a' / 'b'}"]) == 2
    assert sorted(path.name for path in kept.iterdir()) == ["notes.txt"]
    assert main(["generate", f"ckpt={trained_run}", *refused, f"output_dir={kept}"]) == 2
    assert sorted(path.name for path in kept.iterdir()) == ["notes.txt"]


def test_a_long_generation_says_how_far_it_got(trained_run, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("xdllm.run.generation_progress.PROGRESS_EVERY_SECONDS", 0.0)  # a line per batch
    assert main(["generate", f"ckpt={trained_run}", "num_samples=10", "batch_size=4",
                 f"output_dir={tmp_path / 'gen'}"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("generated ")]
    assert [line.split(" in ")[0] for line in lines] == [  # batches of at most 4, evened out: 4, 3, 3
        "generated 4 samples (1 batch)", "generated 7 samples (2 batches)", "generated 10 samples (3 batches)"]
    assert all(line.endswith(" tokens/s") for line in lines)
    assert main(["eval", f"ckpt={trained_run}", "num_samples=4", "batch_size=4"]) == 0
    assert "generated 4 samples (1 batch)" in capsys.readouterr().err
    monkeypatch.setattr("xdllm.run.generation_progress.PROGRESS_EVERY_SECONDS", 10.0)
    assert main(["generate", f"ckpt={trained_run}", "num_samples=4", f"output_dir={tmp_path / 'quick'}"]) == 0
    assert "generated " not in capsys.readouterr().err  # a short generation stays quiet


def test_a_resumed_generation_s_progress_counts_the_time_before_its_stop(caplog):
    times = iter([100.0, 130.0])
    progress = GenerationProgress(every_seconds=0.0, clock=lambda: next(times), earlier_seconds=20.0)
    with caplog.at_level(logging.INFO, logger="xdllm.run.generation_progress"):
        progress.batch_done(samples=40, batches=10, tokens=500)  # 500 tokens over 20 s before and 30 s now
    assert caplog.messages == ["generated 40 samples (10 batches) in 50 s, 10 tokens/s"]
