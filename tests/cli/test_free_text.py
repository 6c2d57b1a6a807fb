"""Runs on free text report the NLL or its bound, not exact match, and end with a few samples;
the README's text line works as written."""

import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_tokenizer_train import corpus_lines
from tiny_run import TINY_TEXT

from xdllm.cli.main import main
from xdllm.config.compose import compose_config
from xdllm.errors import XdllmError
from xdllm.run.free_text import apply_task_defaults


@pytest.fixture
def text_folder(tmp_path, monkeypatch):
    """A folder holding corpus.txt and tokenizer.json, as the README's text line expects."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("\n".join(corpus_lines()) + "\n")
    assert main(["tokenizer", "train", "corpus.txt", "-o", "tokenizer.json", "--vocab-size", "300"]) == 0
    return tmp_path


def _summary(capsys) -> dict:
    return _summary_of(capsys.readouterr().out)


def _summary_of(out: str) -> dict:
    return json.loads(out[out.index("{"):])


@pytest.mark.slow
def test_mdlm_on_text_reports_its_bound_and_a_few_samples(text_folder, capsys):
    run_dir = text_folder / "run"
    assert main(["train", "task=text_file", "task.params.path=corpus.txt", "tokenizer=tokenizer.json",
                 "model=mdlm", *TINY_TEXT, "text_samples_after_train=2", f"run_dir={run_dir}"]) == 0
    captured = capsys.readouterr()
    summary = _summary_of(captured.out)
    assert summary["split"] == "test" and summary["nll_bound"] > 0 and summary["ppl_bound"] > 1
    assert "exact_match" not in summary and summary["text_samples"] == 2 and "num_samples" not in summary
    config = OmegaConf.load(run_dir / "config.yaml")
    assert config.data.validation_roles == ["loss"]
    assert (config.checkpoint.monitor, config.checkpoint.mode) == ("val/loss", "min")
    records = [json.loads(line) for line in open(summary["predictions"])]
    assert len(records) == 2 and all("target" not in record and record["text"] for record in records)
    for record in records:  # something to read at once, on stderr and in the run's log
        said = f"text sample {record['sample_index']}: {' '.join(record['text'].split())[:200]}"
        assert said in captured.err and said in (run_dir / "train.log").read_text()
    # drawn at text_samples_temperature (1.0), not greedily: two texts, not one written twice
    assert summary["predictions"].endswith("_temperature=1.0/predictions.jsonl")
    assert records[0]["ids"] != records[1]["ids"]
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "val/nll_bound" in tags and "val/exact_match" not in tags
    ((step, bound),) = [(s.step, s.value) for s in events.Scalars("test/nll_bound")]
    assert bound == pytest.approx(summary["nll_bound"], rel=1e-5)


@pytest.mark.slow
def test_the_readme_text_line_works_as_written(text_folder, capsys):
    # README: xdllm train task=text_file task.params.path=corpus.txt tokenizer=tokenizer.json collator=packed_mlm
    assert main(["train", "task=text_file", "task.params.path=corpus.txt", "tokenizer=tokenizer.json",
                 "collator=packed_mlm", *TINY_TEXT, "text_samples_after_train=0", "run_dir=run"]) == 0
    summary = _summary(capsys)
    assert summary["loss"] > 0 and "text_samples" not in summary  # no samples asked for


@pytest.mark.slow
def test_eval_of_free_text_reports_the_loss_and_generates_nothing(text_folder, capsys):
    assert main(["train", "task=text_file", "task.params.path=corpus.txt", "tokenizer=tokenizer.json",
                 "model=mdlm", *TINY_TEXT, "text_samples_after_train=0", "optim.ema_decay=0.9",
                 "run_dir=run"]) == 0
    after_training = _summary(capsys)
    assert after_training["ema"] is True  # which weights the figures come from, samples or not
    assert main(["eval", "ckpt=run"]) == 0
    captured = capsys.readouterr()
    summary = _summary_of(captured.out)
    assert {key: summary[key] for key in ("loss", "nll_bound", "ppl_bound")} == pytest.approx(
        {key: after_training[key] for key in ("loss", "nll_bound", "ppl_bound")}, rel=1e-6)
    assert not {"num_samples", "mean_steps", "tokens_per_second"} & set(summary)  # nothing generated
    assert summary["ema"] is True
    assert Path(summary["checkpoint"]).resolve() == Path(after_training["checkpoint"]).resolve()
    assert "same text" not in captured.err and "no generation" in captured.err
    assert main(["eval", "ckpt=run", "predictor.temperature=1.0"]) == 2
    assert "predictor.temperature does not apply" in capsys.readouterr().err


@pytest.mark.slow
def test_greedy_samples_of_free_text_are_one_text_and_generate_says_so(text_folder, capsys):
    run_dir = text_folder / "run"
    assert main(["train", "task=text_file", "task.params.path=corpus.txt", "tokenizer=tokenizer.json",
                 *TINY_TEXT, "text_samples_after_train=3", "text_samples_temperature=null",
                 f"run_dir={run_dir}"]) == 0
    summary = _summary(capsys)
    records = [json.loads(line) for line in open(summary["predictions"])]
    assert len(records) == 3 and records[0]["ids"] == records[1]["ids"] == records[2]["ids"]
    assert main(["generate", f"ckpt={run_dir}", "num_samples=3"]) == 0
    assert "all 3 samples are the same text" in capsys.readouterr().err
    assert main(["generate", f"ckpt={run_dir}", "num_samples=3", "predictor.temperature=1.0"]) == 0
    captured = capsys.readouterr()
    records = [json.loads(line) for line in open(_summary_of(captured.out)["predictions"])]
    assert len({tuple(record["ids"]) for record in records}) > 1 and "same text" not in captured.err


@pytest.mark.slow
def test_a_judge_scores_free_text_at_every_validation_after_training_and_in_eval(text_folder, capsys):
    text = ["task=text_file", "task.params.path=corpus.txt", "tokenizer=tokenizer.json", *TINY_TEXT]
    assert main(["train", *text, "model=arlm", "text_samples_after_train=0", "run_dir=arlm"]) == 0
    capsys.readouterr()
    assert main(["train", *text, "model=mdlm", "mdlm.target_length=17", "judge=arlm", "text_samples_after_train=3",
                 "run_dir=mdlm"]) == 0
    after_training = _summary(capsys)
    judge = str((text_folder / "arlm" / "checkpoints" / "best.ckpt").resolve())
    assert after_training["text_samples"] == 3 and after_training["judge"] == judge  # the samples are judged
    assert after_training["gen_ppl"] == pytest.approx(math.exp(after_training["gen_nll"]))
    config = OmegaConf.load(text_folder / "mdlm" / "config.yaml")
    assert config.judge == str(text_folder / "arlm")  # absolute: the run works from anywhere
    assert config.data.validation_roles == ["loss", "prediction"]  # the judge needs generations
    assert config.checkpoint.monitor == "val/loss"  # not exact match: free text has no answers
    events = EventAccumulator(str(text_folder / "mdlm" / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert [s.step for s in events.Scalars("val/gen_ppl")] == [2, 4]  # every validation
    assert "val/gen_entropy" in tags and "val/exact_match" not in tags and "val/nll_bound" in tags
    assert main(["eval", "ckpt=mdlm", "judge=arlm", "predictor.temperature=1.0"]) == 0
    summary = _summary(capsys)
    assert summary["nll_bound"] > 0 and summary["num_samples"] == 8  # the loss, and data.num_test_samples texts
    assert summary["gen_ppl"] == pytest.approx(math.exp(summary["gen_nll"])) and summary["gen_entropy"] > 0
    assert summary["judge"] == judge


def _defaults(roles=None, monitor=None, mode=None, prompt_len=0, judge=None):
    config = OmegaConf.create({"judge": judge, "data": {"validation_roles": roles},
                               "checkpoint": {"monitor": monitor, "mode": mode}})
    apply_task_defaults(config, type("Task", (), {"max_prompt_len": prompt_len})())
    config.pop("judge")
    return OmegaConf.to_container(config)


def test_null_defaults_follow_the_task():
    assert _defaults(prompt_len=8) == {"data": {"validation_roles": ["loss", "prediction"]},
                                       "checkpoint": {"monitor": "val/exact_match", "mode": "max"}}
    assert _defaults() == {"data": {"validation_roles": ["loss"]},
                           "checkpoint": {"monitor": "val/loss", "mode": "min"}}
    explicit = _defaults(roles=["loss", "prediction"], monitor="val/nll_bound")
    assert explicit["checkpoint"] == {"monitor": "val/nll_bound", "mode": "min"}
    assert _defaults(monitor="val/token_accuracy", prompt_len=3)["checkpoint"]["mode"] == "max"
    assert _defaults(monitor="val/loss", mode="max")["checkpoint"]["mode"] == "max"  # given: kept
    judged = _defaults(judge="arlm")  # free text with a judge: validation generates, the loss is kept best
    assert judged["data"]["validation_roles"] == ["loss", "prediction"]
    assert judged["checkpoint"]["monitor"] == "val/loss"
    assert _defaults(roles=["loss"], judge="arlm")["data"]["validation_roles"] == ["loss"]  # given: kept
    assert _defaults(roles=["prediction"], judge="arlm")["data"]["validation_roles"] == ["prediction"]
    assert _defaults(roles=["prediction"], prompt_len=3)["checkpoint"]["monitor"] == "val/exact_match"


def test_validating_free_text_by_unjudged_generations_alone_is_refused():
    """It trained to the first validation, logged no metric, and stopped there on the monitor."""
    with pytest.raises(XdllmError, match=r"^data\.validation_roles=\[prediction\] logs no metric on free text: its "
                                         r"generations have no reference to score \(and no judge= scores them\); add "
                                         r"loss, or give judge=<an arlm run with the same tokenizer>$"):
        _defaults(roles=["prediction"])


@pytest.mark.parametrize("family", ["arlm", "mdlm", "bd3lm", "udlm", "hybrid"])
def test_text_experiments_leave_validation_roles_to_the_default(family):
    # null: the loss alone, or the loss and generation when a judge= scores what validation generates
    config = compose_config("train", [f"experiment=text_{family}"])
    assert config.data.validation_roles is None


@pytest.mark.slow
def test_free_text_of_a_prepared_run_is_not_bounded_by_its_test_split(text_folder, capsys):
    """Free text is generated from empty prompts, which read nothing of the split: 8 texts after
    training, and 12 with generate, from a test split of fewer (they were refused, after training
    at first)."""
    assert main(["data", "prepare", "corpus.txt", "-o", "prepared", "--tokenizer", "tokenizer.json",
                 "--test-fraction", "0.02"]) == 0
    samples = json.loads(capsys.readouterr().out)["samples"]
    test_samples = samples["test"]
    assert 0 < test_samples < 8
    tiny = [override for override in TINY_TEXT if not override.startswith("task.params.max_tokens")]
    assert main(["train", "task=prepared", "task.params.path=prepared", "tokenizer=tokenizer.json", "model=mdlm",
                 *tiny, f"data.num_val_samples={samples['validation']}", f"data.num_test_samples={test_samples}",
                 "trainer.max_steps=1", "run_dir=run"]) == 0
    assert _summary(capsys)["text_samples"] == 8
    assert main(["generate", "ckpt=run", "num_samples=12", "output_dir=twelve"]) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in (text_folder / "twelve" / "predictions.jsonl").read_text().splitlines()]
    assert [record["sample_index"] for record in records] == list(range(12))
