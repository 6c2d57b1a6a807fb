"""``judge=<arlm run>``: an autoregressive run scores what ``xdllm generate`` / ``eval`` generated."""

import json
import math
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_run import TINY, TINY_MLM, TINY_RUN

import xdllm
import xdllm.run.judge_model as judge_model
from xdllm.cli.main import main
from xdllm.data.tokenizer import SymbolTokenizer, builtin_tokenizer
from xdllm.errors import XdllmError
from xdllm.evaluate.generative_perplexity import GenerativeJudge
from xdllm.run import generate as generate_module
from xdllm.run import generation_check as check_module
from xdllm.run.judge_model import check_same_vocabulary, judge_for_generation
from xdllm_models.arlm.model import causal_rotary_transformer


@pytest.fixture(scope="module")
def judge_run(tmp_path_factory):
    """A briefly trained ARLM on the sort task of the shared MLM run (the built-in tokenizer)."""
    run_dir = tmp_path_factory.mktemp("judge") / "arlm"
    assert main(["train", "experiment=sort_arlm", *TINY_RUN[1:], *TINY_MLM, "trainer.max_steps=6",
                 "trainer.val_check_interval=3", f"run_dir={run_dir}"]) == 0
    return run_dir


def _summary(capsys) -> dict:
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


@pytest.mark.slow
def test_generate_with_a_judge_scores_every_sample_and_the_whole(trained_run, judge_run, tmp_path, capsys):
    out_dir = tmp_path / "gen"
    assert main(["generate", f"ckpt={trained_run}", f"judge={judge_run}", "num_samples=10", "batch_size=4",
                 f"output_dir={out_dir}"]) == 0
    summary = _summary(capsys)
    assert summary["judge"] == str((judge_run / "checkpoints" / "best.ckpt").resolve())
    assert 0.0 <= summary["exact_match"] <= 1.0  # the run's own metrics are still there
    records = [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]
    assert all(1 <= record["gen_tokens"] <= 5 for record in records)  # 4 digits and EOS at most
    scored = sum(record["gen_tokens"] for record in records)
    assert summary["gen_nll"] == pytest.approx(sum(r["gen_nll"] * r["gen_tokens"] for r in records) / scored)
    assert summary["gen_ppl"] == pytest.approx(math.exp(summary["gen_nll"]))
    assert summary["gen_entropy"] == pytest.approx(sum(r["gen_entropy"] for r in records) / len(records))
    assert summary["gen_ended"] == pytest.approx(sum(r["gen_ended"] for r in records) / len(records))
    events = EventAccumulator(str(out_dir / "tensorboard"))
    events.Reload()
    assert events.Scalars("generate/gen_ppl")[0].value == pytest.approx(summary["gen_ppl"], rel=1e-6)


@pytest.mark.slow
def test_a_sweep_loads_its_judge_once(trained_run, judge_run, tmp_path, capsys, monkeypatch):
    loads = []
    load = judge_model.load_judge
    monkeypatch.setattr(judge_model, "load_judge", lambda *args, **kwargs: loads.append(args) or load(*args, **kwargs))
    assert main(["generate", "-m", f"ckpt={trained_run}", f"judge={judge_run}", "num_samples=4",
                 "predictor.max_steps=1,5", f"output_dir={tmp_path / 'sweep'}"]) == 0
    runs = _summary(capsys)["runs"]
    assert len(loads) == 1
    assert [(r["settings"]["predictor.max_steps"], r["judge"]) for r in runs] == [(1, runs[0]["judge"]),
                                                                               (5, runs[0]["judge"])]
    assert all(r["gen_ppl"] > 1 for r in runs)


@pytest.mark.slow
def test_eval_with_a_judge_adds_its_scores_to_the_metrics(trained_run, judge_run, capsys):
    assert main(["eval", f"ckpt={trained_run}", f"judge={judge_run}", "num_samples=8"]) == 0
    summary = _summary(capsys)
    assert {"loss", "exact_match", "gen_nll", "gen_ppl", "gen_entropy"} <= set(summary)


def test_a_judge_must_be_an_autoregressive_run(trained_run, judge_run, tmp_path, capsys):
    out = tmp_path / "gen"
    assert main(["generate", f"ckpt={judge_run}", f"judge={trained_run}", f"output_dir={out}"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    best = trained_run / "checkpoints" / "best.ckpt"
    assert error == (f"xdllm: error: judge={trained_run}: {best} is a run of the mlm family; the judge scores text "
                     "left to right, so it must be an autoregressive run (model=arlm, e.g. xdllm train "
                     "experiment=text_arlm) trained with the same tokenizer")
    assert not out.exists()  # refused before anything was generated or written


def test_a_judge_with_another_vocabulary_is_refused_naming_the_difference():
    builtin = builtin_tokenizer()
    symbols = [builtin.id_to_token(i) for i in range(4, builtin.vocab_size)]
    with pytest.raises(XdllmError, match="judge=j: the judge's tokenizer has vocab_size 5, the generating run's 46"):
        check_same_vocabulary(builtin, SymbolTokenizer(symbols[:1]), "judge=j")
    swapped = SymbolTokenizer([symbols[1], symbols[0], *symbols[2:]])
    with pytest.raises(XdllmError, match="judge=j: token id 4 is '0' for the generating run but '1' for the judge"):
        check_same_vocabulary(builtin, swapped, "judge=j")
    check_same_vocabulary(builtin, SymbolTokenizer(symbols), "judge=j")  # the same symbols: accepted


class _BlockPredictor:
    """Places its answer on whole blocks of 4 after the prompt, as a block-wise predictor does."""

    def positions_needed(self, prompt_length: int) -> int:
        return prompt_length + 12


def test_a_judge_with_fewer_positions_than_the_generation_needs_is_refused_before_it_runs():
    tokenizer = builtin_tokenizer()
    model = causal_rotary_transformer(vocab_size=tokenizer.vocab_size, d_model=8, n_layers=1, n_heads=2,
                                      max_positions=12)
    loaded = {"j": GenerativeJudge(model, tokenizer, Path("j.ckpt"), max_positions=12)}
    assert judge_for_generation("j", tokenizer, object(), 5, 7, loaded) is loaded["j"]  # 12 positions: fits
    with pytest.raises(XdllmError, match=r"judge=j: the longest prompt \(5 tokens with bos\) plus "
                                         r"predictor.max_new_tokens=8 needs up to 13 positions; the judge has "
                                         "max_positions=12"):
        judge_for_generation("j", tokenizer, object(), 5, 8, loaded)
    with pytest.raises(XdllmError, match=r"needs up to 17 positions \(placed on whole blocks by the predictor\)"):
        judge_for_generation("j", tokenizer, _BlockPredictor(), 5, 7, loaded)


class _StopsAtSecondBatch:
    def __init__(self, predictor) -> None:
        self.predictor, self.calls = predictor, 0

    def predict(self, *args, **kwargs):
        self.calls += 1
        if self.calls == 2:
            raise KeyboardInterrupt
        return self.predictor.predict(*args, **kwargs)


@pytest.mark.slow
def test_a_stopped_generation_continues_with_its_judge(trained_run, judge_run, tmp_path, monkeypatch, capsys):
    options = [f"judge={judge_run}", "num_samples=8", "batch_size=4"]
    assert main(["generate", f"ckpt={trained_run}", *options, f"output_dir={tmp_path / 'whole'}"]) == 0
    whole = _summary(capsys)
    build = check_module._build_predictor
    monkeypatch.setattr(check_module, "_build_predictor", lambda run, o: _StopsAtSecondBatch(build(run, o)))
    stopped = tmp_path / "stopped"
    assert main(["generate", f"ckpt={trained_run}", *options, f"output_dir={stopped}"]) == 130
    monkeypatch.undo()
    capsys.readouterr()
    assert main(["generate", f"resume={stopped}"]) == 0  # the judge comes from the generation's generate.yaml
    resumed = _summary(capsys)
    names = ("judge", "gen_nll", "gen_ppl", "gen_entropy", "gen_ended")
    assert {name: resumed[name] for name in names} == pytest.approx({name: whole[name] for name in names})


@pytest.mark.slow
def test_the_judges_time_is_not_generation_time(trained_run, judge_run, tmp_path, monkeypatch, capsys):
    clock = {"offset": 0.0}  # every judged batch takes 100 s more on the generation's clock
    real_clock = time.perf_counter
    monkeypatch.setattr(generate_module.time, "perf_counter", lambda: real_clock() + clock["offset"])
    score = GenerativeJudge.score

    def slow_score(self, batch, prediction):
        clock["offset"] += 100.0
        return score(self, batch, prediction)

    monkeypatch.setattr(GenerativeJudge, "score", slow_score)
    assert main(["generate", f"ckpt={trained_run}", f"judge={judge_run}", "num_samples=8", "batch_size=4",
                 f"output_dir={tmp_path / 'gen'}"]) == 0
    summary = _summary(capsys)
    assert clock["offset"] == 200.0 and summary["tokens_per_second"] > 8 * 5 / 50  # 40 tokens in under 50 s


@pytest.mark.slow
def test_training_with_a_judge_logs_its_scores_at_every_validation(judge_run, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", *TINY, "trainer.max_steps=4", "trainer.val_check_interval=2", f"judge={judge_run}",
                 "generate_after_train=true", f"run_dir={run_dir}"]) == 0
    assert "judge" in _summary(capsys)  # the generation after training is judged too
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert [s.step for s in events.Scalars("val/gen_ppl")] == [2, 4]
    assert [s.step for s in events.Scalars("val/exact_match")] == [2, 4]  # the answers are scored as before
    assert OmegaConf.load(run_dir / "config.yaml").checkpoint.monitor == "val/exact_match"


@pytest.mark.slow
def test_a_judge_with_validation_that_generates_nothing_is_warned_of(judge_run, tmp_path, capsys):
    assert main(["train", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=2", f"judge={judge_run}",
                 "data.validation_roles=[loss]", "generate_after_train=false", f"run_dir={tmp_path / 'run'}"]) == 0
    assert (f"judge={judge_run} scores generated texts, but data.validation_roles=['loss'] generates none during "
            "training: only the generation after training is judged; data.validation_roles=[loss,prediction] "
            "judges every validation") in capsys.readouterr().err


@pytest.mark.slow
def test_evaluate_run_takes_a_judge(trained_run, judge_run, capsys):
    assert main(["eval", f"ckpt={trained_run}", f"judge={judge_run}", "num_samples=8"]) == 0
    printed = _summary(capsys)
    computed = xdllm.evaluate_run(trained_run, num_samples=8, judge=judge_run)
    assert {name: computed[name] for name in ("judge", "gen_nll", "gen_ppl", "gen_entropy", "gen_ended")} == \
        {name: printed[name] for name in ("judge", "gen_nll", "gen_ppl", "gen_entropy", "gen_ended")}
