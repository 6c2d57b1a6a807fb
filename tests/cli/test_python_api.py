"""From Python: `xdllm.complete` completes prompts as `xdllm generate prompts_file=` does, and
`xdllm.evaluate_run` scores a run as `xdllm eval` does."""

import importlib
import inspect
import json
from pathlib import Path

import pytest
from tiny_run import TINY_TEXT

import xdllm
from xdllm.cli.main import main
from xdllm.errors import XdllmError
from xdllm.history import iter_samples
from xdllm.run.checkpoint import TrainedRun

PROMPTS = ["3 1 2 0", "9 9 1 5", "7 7 7 7", "0 8 2 6", "5 4 3 2"]
TIMELESS = ("sample_index", "prompt", "text", "ids", "steps_taken")


def _without_times(records):
    return [{key: record[key] for key in TIMELESS} for record in records]


def test_completions_are_the_predictions_generate_writes_for_a_prompts_file(trained_run, tmp_path, capsys):
    prompts_file = tmp_path / "prompts.txt"
    prompts_file.write_text("\n".join(PROMPTS) + "\n")
    out_dir = tmp_path / "gen"
    assert main(["generate", f"ckpt={trained_run}", f"prompts_file={prompts_file}", "batch_size=2",
                 "predictor.threshold=0.01", f"output_dir={out_dir}"]) == 0
    written = [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]

    records = xdllm.complete(str(trained_run), PROMPTS, predictor={"threshold": 0.01}, batch_size=3)

    assert _without_times(records) == _without_times(written)
    assert [record["prompt"] for record in records] == PROMPTS
    from_a_generator = xdllm.complete(str(trained_run), (prompt for prompt in PROMPTS), predictor={"threshold": 0.01})
    assert _without_times(from_a_generator) == _without_times(written)
    assert any(record["steps_taken"] < 5 for record in records)  # the threshold reached the predictor


def test_completions_without_options_use_the_run_s_predictor_as_generate_does(trained_run, tmp_path, monkeypatch):
    """Without options no predictor is built per call (a sixth of a one-prompt call on the CPU);
    the completions are generate's with the run's own options."""
    out_dir = tmp_path / "gen"
    (tmp_path / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    assert main(["generate", f"ckpt={trained_run}", f"prompts_file={tmp_path / 'prompts.txt'}",
                 f"output_dir={out_dir}"]) == 0
    written = [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]
    run = xdllm.load_trained(trained_run)
    monkeypatch.setattr(TrainedRun, "predictor", lambda self, **options: pytest.fail("a predictor was built"))
    assert _without_times(xdllm.complete(run, PROMPTS)) == _without_times(written)


def test_completions_with_responses_are_scored_as_a_jsonl_prompts_file_is(trained_run, tmp_path):
    (test_predictions,) = trained_run.glob("generate/*/predictions.jsonl")
    held_out = [json.loads(line) for line in test_predictions.read_text().splitlines()][:5]
    records = xdllm.complete(trained_run, [r["prompt"] for r in held_out], responses=[r["target"] for r in held_out],
                             batch_size=2)
    scored = ("prompt", "text", "target", "exact_match", "correct_tokens")
    assert [{key: r[key] for key in scored} for r in records] == [{key: r[key] for key in scored} for r in held_out]


def test_history_of_the_completions_is_recorded_per_batch(trained_run, tmp_path):
    run = xdllm.load_trained(trained_run)
    assert isinstance(run, TrainedRun)
    records = xdllm.complete(run, PROMPTS, batch_size=2, history_dir=tmp_path / "history", history_k=3)
    assert len(list((tmp_path / "history").glob("history-*.pt"))) == 3  # batches of 2, 2, 1
    samples = list(iter_samples(tmp_path / "history"))
    assert [sample.sample_id for sample in samples] == list(range(len(PROMPTS)))
    for sample, record in zip(samples, records):
        assert sample.output_ids.tolist() == record["ids"]
        assert sample.topk_ids.shape[-1] == 3
        assert len(sample.steps) == record["steps_taken"]


def test_a_completion_s_denoising_is_a_picture_in_a_notebook(trained_run, tmp_path):
    from xdllm.history import DenoisingFigure

    xdllm.complete(trained_run, PROMPTS[:1], history_dir=tmp_path / "history")
    (sample,) = iter_samples(tmp_path / "history")
    figure = DenoisingFigure(sample)
    first, last = figure.picture(0), figure.picture(figure.num_steps - 1)
    assert first.mode == last.mode == "RGB" and first.size == last.size
    assert first.tobytes() != last.tobytes()  # later rows are filled in


def test_a_loaded_run_prints_in_one_line_that_says_what_it_is(trained_run):
    """It printed its config twice and the whole model: some hundred lines in a notebook."""
    run = xdllm.load_trained(trained_run)
    parameters = sum(parameter.numel() for parameter in run.model.parameters())
    assert repr(run) == (f"TrainedRun(family='mlm', task='sort', step={run.global_step}, parameters={parameters:,}, "
                         f"checkpoint='{run.checkpoint}')")
    assert str([run]) == f"[{run!r}]"


def test_a_run_predictor_takes_overrides_checked_against_its_signature(trained_run):
    run = xdllm.load_trained(trained_run)
    assert run.predictor(threshold=0.7).threshold == 0.7
    assert run.predictor().threshold == run.config.predictor.get("threshold")
    with pytest.raises(XdllmError, match=r"predictor.treshold \(did you mean predictor.threshold\?\)"):
        run.predictor(treshold=0.7)


@pytest.mark.parametrize(("prompts", "options", "message"), [
    ("3 1 2 0", {}, r"prompts is one string \('3 1 2 0'\); give a list of prompts, e\.g\. \['3 1 2 0'\]"),
    ([], {}, "prompts is empty"),
    (["3 1 2 0", "hello"], {}, r"prompts\[1\]: SymbolTokenizer.encode: unknown symbol 'hello'"),
    (["3 1 2 0"], {"batch_size": 0}, "batch_size must be >= 1, got 0"),
    (["3 1 2 0"], {"history_dir": "history", "history_k": 0}, "history_k must be >= 1, got 0"),
    (["3 1 2 0"], {"history_dir": __file__}, "is a file, not a folder"),
    (["3 1 2 0"], {"device": "gpu"}, "device must be one of auto, cpu, cuda, got 'gpu'"),
    (["3 1 2 0"], {"predictor": {"threshold": "high"}}, "predictor.threshold='high' is not allowed"),
    (["3 1 2 0", "1 2"], {"responses": ["0 1 2 3"]}, "1 responses for 2 prompts: give one response per prompt"),
    (["3 1 2 0"], {"responses": "0 1 2 3"}, "responses is one string"),
    (["3 1 2 0"], {"responses": ["0 1 hello 3"]}, r"responses\[0\]: the response: SymbolTokenizer.encode: unknown "
     r"symbol 'hello'"),
    (["3 1 2 0"], {"responses": ["0 1 2 3 4 5"]}, r"responses\[0\]: the response is 7 tokens with its EOS, more "
     r"than the 5 the predictor generates"),
    (["3 1 2 0", "3 <mask> 2 0"], {}, r"prompts\[1\]: the prompt holds mask tokens \(<mask>\), which a "
     r"continuation \(the predictor's max_new_tokens=5\) does not fill; to fill them instead, give "
     r"predictor=\{'max_new_tokens': 0\}"),
])
def test_wrong_input_is_refused_in_one_line_that_names_it(trained_run, prompts, options, message):
    run = xdllm.load_trained(trained_run)
    with pytest.raises(XdllmError, match=message):
        xdllm.complete(run, prompts, **options)


def test_masks_in_a_prompt_are_filled_with_no_new_tokens(trained_run):
    (record,) = xdllm.complete(trained_run, ["3 <mask> 2 0 0 <mask> 2 3"], predictor={"max_new_tokens": 0})
    assert record["steps_taken"] == 2 and len(record["ids"]) == 7  # from the first mask to the end
    assert 1 not in record["ids"]  # no mask left (the mask's id is 1)


def test_a_prompt_that_is_not_a_string_is_refused_by_its_index(trained_run):
    unchecked = inspect.unwrap(xdllm.complete)  # beartype refuses it first in the tests; users run without
    with pytest.raises(XdllmError, match=r"prompts\[1\] is int 7, not a string"):
        unchecked(xdllm.load_trained(trained_run), ["3 1 2 0", 7])


def test_evaluate_run_reports_what_xdllm_eval_prints(trained_run, capsys):
    capsys.readouterr()
    assert main(["eval", f"ckpt={trained_run}", "num_samples=8", "predictor.threshold=0.01"]) == 0
    printed = json.loads(capsys.readouterr().out)
    run = xdllm.load_trained(trained_run)
    computed = xdllm.evaluate_run(run, num_samples=8, predictor={"threshold": 0.01})
    timings = ("tokens_per_second", "seconds")
    assert {k: v for k, v in computed.items() if k not in timings} == {
        k: v for k, v in printed.items() if k not in timings}
    assert computed["mean_steps"] == 1.0 and computed["num_samples"] == 8  # the threshold reached the predictor
    assert xdllm.evaluate_run(str(trained_run), split="validation", num_samples=4)["num_samples"] == 4


@pytest.mark.parametrize(("options", "message"), [
    ({"split": "train"}, "split='train' is not allowed: split must be test or validation"),
    ({"num_samples": 0}, "num_samples=0 is not allowed"),
    ({"predictor": {"treshold": 0.9}}, r"did you mean predictor.threshold\?"),
])
def test_evaluate_run_refuses_wrong_options_in_one_line(trained_run, options, message):
    with pytest.raises(XdllmError, match=message):
        xdllm.evaluate_run(trained_run, **options)


def test_the_top_level_names_are_the_run_layers_and_others_are_refused():
    from xdllm.run.checkpoint import load_trained
    from xdllm.run.complete import complete
    from xdllm.run.evaluate import evaluate_run

    assert xdllm.load_trained is load_trained and xdllm.complete is complete and xdllm.evaluate_run is evaluate_run
    assert {"load_trained", "complete", "evaluate_run", "TrainedRun"} <= set(dir(xdllm))  # tab completion
    with pytest.raises(AttributeError, match="module 'xdllm' has no attribute 'generate'"):
        xdllm.generate  # noqa: B018


STORIES = Path(__file__).parents[2] / "experiments" / "data"


@pytest.fixture(scope="module")
def word_level_run(tmp_path_factory) -> Path:
    """A run on the shipped stories corpus, whose tokenizer is word-level: 81 lower-case words."""
    run_dir = tmp_path_factory.mktemp("stories") / "run"
    assert main(["train", "task=text_file", f"task.params.path={STORIES / 'stories.txt'}",
                 f"tokenizer={STORIES / 'stories_tokenizer.json'}", "model=mdlm", *TINY_TEXT,
                 "generate_after_train=false", f"run_dir={run_dir}"]) == 0
    return run_dir


def test_words_outside_a_word_level_vocabulary_are_refused_not_read_as_unknown(word_level_run, tmp_path, capsys):
    with pytest.raises(XdllmError, match=r"^prompts\[1\]: 'Once', 'upon', 'time' are not in the tokenizer's "
                                         r"vocabulary of 81 tokens: the model would see its unknown token <unk> "
                                         r"instead$"):
        xdllm.complete(word_level_run, ["sam went to the park", "Once upon a time"])
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("sam went to the park\nSam went to the park\n")
    capsys.readouterr()
    assert main(["generate", f"ckpt={word_level_run}", f"prompts_file={prompts}"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"xdllm: error: {prompts}:2: 'Sam' is not in the tokenizer's vocabulary of 81 tokens (in lower case it is "
        "known): the model would see its unknown token <unk> instead")
    (record,) = xdllm.complete(word_level_run, ["sam went to the park"], predictor={"max_new_tokens": 4})
    assert record["prompt"] == "sam went to the park"  # the whole prompt reached the model


@pytest.mark.parametrize(("package", "name", "module"), [("xdllm.data", "DiffusionData", "xdllm.data.datamodule"),
                                                       ("xdllm.history", "iter_samples", "xdllm.history.reader")])
def test_subpackages_load_their_names_on_first_use(package, name, module):
    """xdllm, xdllm.data and xdllm.history share one PEP 562 helper (xdllm/lazy_names.py)."""
    imported = importlib.import_module(package)
    assert getattr(imported, name) is getattr(importlib.import_module(module), name)
    assert name in dir(imported) and name in imported.__all__
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nope'"):
        imported.nope  # noqa: B018
